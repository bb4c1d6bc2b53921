"""Benchmark: the hf backend against the vllm backend on this CPU, in one run (issue 48).

DEER: ``--entities`` WN18RR entity prompts (the tail prompts of the 500-triple test subset's candidates) encoded
by each backend's encoder; BEAR: ``--statements`` statements of BEAR's first relations scored by each backend's
statement scorer.  Both get the same token ids (the toolkit's); the vectors' largest relative difference and the
scores' largest difference are printed with the times.  The vllm engines start before the timing (their start
is its own row); each backend is warmed on a few prompts first.  Run it in vLLM's environment:

    .venv-vllm/bin/python benchmarks/bench_vllm_cpu.py --out results/bench_vllm_cpu.json
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
import numpy as np

from deer.backends import open_backend
from deer.backends.models import open_model
from deer.base.files import package_versions, write_json
from deer.platform.tables import markdown_table
from deer.platform.templates import PromptTemplates
from kg_data import build_queries, load_kg
from kg_data.bear import load_bear_dataset

WARM_UP = 8  # prompts / statements each backend runs before it is timed


def bear_statements(count: int, data_dir) -> list[str]:
    """The first ``count`` statements of BEAR, relation by relation (every instance, template and answer)."""
    statements = []
    data = load_bear_dataset("bear", data_dir, max_instances=20, seed=0)
    for relation in data.relations.values():
        for template in relation.templates:
            statements.extend(relation.statements(template))
            if len(statements) >= count:
                return statements[:count]
    return statements


def timed(run):
    started = time.perf_counter()
    value = run()
    return value, time.perf_counter() - started


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--entities", default=400, show_default=True, help="WN18RR entity prompts DEER encodes.")
@click.option("--statements", "n_statements", default=400, show_default=True, help="BEAR statements scored.")
@click.option("--data-dir", default=None)
@click.option("--out", "out_path", default="results/bench_vllm_cpu.json", show_default=True)
def main(model_name, entities, n_statements, data_dir, out_path):
    kg = load_kg("wn18rr", data_dir)
    queries = build_queries(kg, "test", subset=500, seed=0)
    texts = [PromptTemplates.tail_prompt(kg, e) for e in queries.candidates[:entities]]
    statements = bear_statements(n_statements, data_dir)
    loaded = open_model(model_name, dtype="float32", device="cpu")
    hf = open_backend("hf", loaded, show_progress=False)
    vllm, open_seconds = timed(lambda: open_backend("vllm", model_name, dtype="float32", device="cpu", show_progress=False))
    _, start_seconds = timed(lambda: [vllm.engines.engine(runner) for runner in ("pooling", "generate")])
    rows, vectors, scores = [{"part": "vllm engines start (pooling, generate)", "backend": "vllm",
                              "seconds": round(open_seconds + start_seconds, 2)}], {}, {}
    for backend in (hf, vllm):
        encoder, scorer = backend.encoder(), backend.statement_scorer()
        encoder.encode(texts[:WARM_UP])
        scorer.score_statements(statements[:WARM_UP])
        encoder, scorer = backend.encoder(), backend.statement_scorer()  # fresh counters
        output, seconds = timed(lambda encoder=encoder: encoder.encode(texts))
        vectors[backend.name] = output.embeddings
        tokens = encoder.stats.tokens
        rows.append({"part": f"deer: {len(texts)} WN18RR entity prompts", "backend": backend.name, "seconds": round(seconds, 2),
                     "tokens": tokens, "tokens_per_second": round(tokens / seconds, 1)})
        scores[backend.name], seconds = timed(lambda scorer=scorer: scorer.score_statements(statements))
        tokens = sum(backend.token_counts(statements))
        rows.append({"part": f"bear: {len(statements)} BEAR statements", "backend": backend.name, "seconds": round(seconds, 2),
                     "tokens": tokens, "tokens_per_second": round(tokens / seconds, 1),
                     "statements_per_second": round(len(statements) / seconds, 1)})
    a, b = vectors["vllm"], vectors["hf"]
    agreement = {"deer_max_relative_difference": float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1))),
                 "bear_max_abs_difference_nats": float(np.max(np.abs(scores["vllm"] - scores["hf"])))}
    load = os.getloadavg()
    text = (f"{model_name}, float32, CPU ({os.cpu_count()} cores, load average {load[0]:.1f} at the end); "
            f"vLLM's vectors within {agreement['deer_max_relative_difference']:.1e} (relative) of hf's, "
            f"its statement scores within {agreement['bear_max_abs_difference_nats']:.1e} nats\n\n" + markdown_table(rows))
    click.echo(text)
    write_json(Path(out_path), {"model": model_name, "dtype": "float32", "cpu_count": os.cpu_count(), "load_average_end": load,
                                "rows": rows, "agreement": agreement, "vllm_options": vllm.engines.options,
                                "versions": package_versions()})


if __name__ == "__main__":
    main()
