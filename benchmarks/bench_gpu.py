"""The GPU benchmark in one command (issue 23): what DEER, LAMA and BEAR cost on the device a user has.

    python benchmarks/bench_gpu.py --model smollm2-135m --out results/gpu        # on a CUDA machine
    python benchmarks/bench_gpu.py --kg tests/tiny_kg --model tiny/ --device cpu --bear-sample 2 ...  # the CPU smoke test

In one process, each part timed apart, and one JSON (``bench_gpu.json``) and table (``bench_gpu.md``):

* **load**: the model's load time (kept out of every other number), the device, the dtype ``auto`` picked.
* **peak**: the device's measured dense GEMM rate in the run's dtype (best of 3 square matmuls): the
  yardstick for achieved FLOP/s.
* **deer-split**: DEER on every query of ``--split`` against all entities; tokens/s and achieved FLOP/s
  (2 x non-embedding parameters x tokens: the attention's quadratic term is left out).
* **deer-paper-protocol**: DEER on every triple of every split (WN18RR: 93,003) against all entities, the
  paper's protocol (``--no-paper-protocol`` skips it).
* **query prompts, whole vs prefix reuse**: the split's query prompts encoded both ways, with the largest
  difference between the two vectors.
* **lama + deer from one pass**: LAMA's pass gives DEER's query vectors (``query_embeddings``).
* **bear-sample**: BEAR on the first ``--bear-sample`` queries against all entities, and that time
  extrapolated to every query of the split and to every triple of every split (the paper's protocol:
  exact BEAR on all of WN18RR; BEAR is queries x entities statements).
* **bear-dataset** (``--bear-relations``): the BEAR score of those relations, and lm-pub-quiz 0.3.3 on the
  same relations with the same model object where it is installed (its batch size ``--lm-pub-quiz-batch-size``).
* **vllm** (``--vllm``; by default where vLLM is installed): the same model on the vllm backend, after the hf
  parts (the hf model moved off the GPU first): its engines' start, DEER on ``--split`` (tokens/s, ranks as the
  hf backend's) and the BEAR score of the first ``--bear-relations`` relation on both backends (predictions as
  hf's); ``--vllm-model-arg KEY=VALUE``: engine options (tensor_parallel_size, gpu_memory_utilization, ...).
  The table's ``backend`` column says which backend each row ran on.
* the peak memory (CUDA: ``max_memory_allocated``; CPU: the process's peak resident set).

Nothing is cached (``cache=False``): every number is work done in this run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import platform
import resource
import time
from pathlib import Path

import click
import numpy as np
import torch

import bear_ref
import deer
from deer.backends.encoder import PromptEOLEncoder
from deer.backends.models import open_model
from deer.base.files import package_versions, write_json, write_text
from deer.platform.tables import markdown_table
from deer.platform.templates import PromptTemplates, query_prompts
from experiments.cli.options import parse_key_values
from experiments.runs import restrict_queries
from kg_data.load import load_kg
from kg_data.queries import queries_for


def measured_peak(device: torch.device, dtype: torch.dtype, size: int) -> float:
    """FLOP/s of the best of three ``size`` x ``size`` matmuls in ``dtype`` on ``device``."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best = float("inf")
    for _ in range(4):  # the first is a warm-up
        synchronize(device)
        started = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_parameters(model) -> int:
    """Parameters a token's forward pass multiplies by (the input embedding is a lookup)."""
    return sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports kB


class Parts:
    """The rows of the table: one per timed part."""

    def __init__(self, loaded, peak_flops: float):
        self.rows: list[dict] = []
        self.flops_per_token = 2 * matmul_parameters(loaded.model)
        self.peak = peak_flops

    def add(self, part: str, seconds: float, tokens: int | None = None, forward_seconds: float | None = None,
            backend: str = "hf", **extra) -> dict:
        row = {"part": part, "backend": backend, "seconds": round(seconds, 3), "tokens": tokens}
        if tokens and forward_seconds:
            achieved = self.flops_per_token * tokens / forward_seconds
            row.update(tokens_per_second=round(tokens / forward_seconds), achieved_tflops=round(achieved / 1e12, 4),
                       share_of_peak=round(achieved / self.peak, 3))
        row.update(extra)
        self.rows.append(row)
        return row



def timed(device: torch.device, run):
    """(``run()``, its seconds), the device's queued work included."""
    synchronize(device)
    started = time.perf_counter()
    value = run()
    synchronize(device)
    return value, time.perf_counter() - started


def work_of(result) -> tuple[int, float]:
    work = result.metadata["work"]
    return int(work["tokens"]), float(work["forward_seconds"])


def vllm_parts(parts: Parts, loaded, engine_options: dict, queries, templates, hf_probe, bear_data, relations,
               torch_device: torch.device) -> None:
    """The vllm backend's rows: BEAR on ``relations`` on hf first, then (the hf model moved off the GPU, whose free
    memory vLLM's gpu_memory_utilization counts) the engines' start, DEER on the split against hf's ranks, and
    BEAR on ``relations`` again."""
    from deer.backends import open_backend

    def bear(backend: str, model):
        result, seconds = timed_wall(lambda: bear_ref.bear_dataset(bear_data, model, relations=relations, backend=backend,
                                                                   show_progress=False))
        return result, seconds, result.metadata["work"]["statements_scored_now"]

    hf_bear = bear("hf", loaded) if relations else None
    loaded.model.to("cpu")
    if torch_device.type == "cuda":
        torch.cuda.empty_cache()
    model = dataclasses.replace(loaded, loading={**loaded.loading, "model_kwargs": engine_options})  # its name and source
    backend, seconds = timed_wall(lambda: open_backend("vllm", model))
    _, start_seconds = timed_wall(lambda: [backend.engines.engine(runner) for runner in ("pooling", "generate")])
    parts.add("vllm engines start (pooling, generate)", seconds + start_seconds, backend="vllm",
              fingerprint_seconds=round(seconds, 3))
    probe = deer.probe(queries, model, templates=templates, backend="vllm", show_progress=False)
    hf_ranks, ranks = hf_probe.ranks(), probe.ranks()
    parts.add(f"deer {len(queries)} queries x {len(queries.candidates)} entities",
              probe.metadata["timings"]["entities_seconds"] + probe.metadata["timings"]["queries_seconds"], *work_of(probe),
              backend="vllm", hit_at_10=probe.metrics["hit@10"], mrr=probe.metrics["mrr"],
              ranks_as_hf=int(np.sum(ranks == hf_ranks)), ranks_differing=int(np.sum(ranks != hf_ranks)))
    if hf_bear is None:
        return
    for name, (result, seconds, statements) in (("hf", hf_bear), ("vllm", bear("vllm", model))):
        same = int((result.table["predicted_id"].to_numpy() == hf_bear[0].table["predicted_id"].to_numpy()).sum())
        parts.add(f"bear data set ({', '.join(relations)})", seconds, backend=name, bear_score=result.metrics["accuracy_mean"],
                  statements=statements, statements_per_second=round(statements / seconds, 1), predictions_as_hf=f"{same}/{len(result.table)}")


def timed_wall(run):
    """(``run()``, its wall seconds)."""
    started = time.perf_counter()
    value = run()
    return value, time.perf_counter() - started


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True, help="Alias, hub id or folder.")
@click.option("--kg", default="wn18rr", show_default=True, help="KG name or folder.")
@click.option("--split", default="test", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--k-shot", default=8, show_default=True)
@click.option("--bear-sample", default=20, show_default=True, help="Queries BEAR ranks against all entities (then extrapolated).")
@click.option("--bear-dataset", "bear_data", default="bear", show_default=True, help="BEAR-format data set (name or folder).")
@click.option("--bear-relations", default="P30,P36", show_default=True, help="Its relations to score ('' skips the part).")
@click.option("--lm-pub-quiz-batch-size", default=32, show_default=True)
@click.option("--paper-protocol/--no-paper-protocol", default=True, show_default=True,
              help="Also DEER on every triple of every split against all entities.")
@click.option("--peak-size", default=8192, show_default=True, help="Matrix size of the GEMM that measures the peak.")
@click.option("--vllm/--no-vllm", "with_vllm", default=None, help="Also the vllm backend (default: where vLLM is installed).")
@click.option("--vllm-model-arg", "vllm_args", multiple=True, metavar="KEY=VALUE", help="A vLLM engine option, repeatable.")
@click.option("--out", "out_dir", default="results/gpu", show_default=True)
def main(model_name, kg, split, dtype, device, k_shot, bear_sample, bear_data, bear_relations, lm_pub_quiz_batch_size,
         paper_protocol, peak_size, with_vllm, vllm_args, out_dir):
    loaded = open_model(model_name, dtype=dtype, device=device)
    torch_device = next(loaded.model.parameters()).device
    torch_dtype = next(loaded.model.parameters()).dtype
    if torch_device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(torch_device)
    peak = measured_peak(torch_device, torch_dtype, peak_size)
    parts = Parts(loaded, peak)
    graph = load_kg(kg)
    templates = PromptTemplates(k_shot=k_shot)
    queries = deer.load_queries(graph, split=split)

    probe = deer.probe(queries, loaded, templates=templates, show_progress=False)
    parts.add(f"deer {split} ({len(queries)} queries x {len(queries.candidates)} entities)",
              probe.metadata["timings"]["entities_seconds"] + probe.metadata["timings"]["queries_seconds"], *work_of(probe),
              hit_at_10=probe.metrics["hit@10"], mrr=probe.metrics["mrr"])
    if paper_protocol:
        everything = np.concatenate([graph.triples(name) for name in graph.splits])
        all_queries = queries_for(graph, "all", everything, np.arange(graph.n_entities, dtype=np.int64))
        paper = deer.probe(all_queries, loaded, templates=templates, show_progress=False)
        parts.add(f"deer paper protocol ({len(all_queries)} triples x {graph.n_entities} entities)",
                  paper.metadata["timings"]["entities_seconds"] + paper.metadata["timings"]["queries_seconds"], *work_of(paper),
                  hit_at_10=paper.metrics["hit@10"], mrr=paper.metrics["mrr"])

    texts = query_prompts(queries, templates)
    vectors = {}
    for reuse in (False, True):
        encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, show_progress=False, reuse_prefix=reuse,
                                   special_tokens=templates.prompt_special_tokens)
        output, seconds = timed(torch_device, lambda: encoder.encode(texts))  # noqa: B023 - called at once
        vectors[reuse] = output.embeddings
        stats = encoder.stats.as_dict()
        parts.add(f"query prompts, {'prefix reuse' if reuse else 'whole'}", seconds, stats["tokens"], stats["forward_seconds"])
    parts.rows[-1]["max_abs_difference_vs_whole"] = float(np.max(np.abs(vectors[True] - vectors[False]))) if len(texts) else 0.0

    lama, seconds = timed(torch_device, lambda: bear_ref.lama(queries, loaded, templates=templates, show_progress=False))
    parts.add("lama (its pass also makes DEER's query vectors)", seconds, hit_at_10=lama.metrics["hit@10"])
    shared, seconds = timed(torch_device, lambda: deer.probe(queries, loaded, templates=templates, show_progress=False,
                                                         query_embeddings=lama.arrays["query_embeddings"]))
    parts.add("deer from lama's query pass (entities only)", seconds, *work_of(shared),
              same_ranks_as_own_pass=bool(np.array_equal(shared.ranks(), probe.ranks())))

    sample = restrict_queries(queries, range(min(bear_sample, len(queries))), None, 0)
    _, seconds = timed(torch_device, lambda: bear_ref.bear(sample, loaded, templates=templates, show_progress=False))
    statements = len(sample) * len(sample.candidates)
    per_query = seconds / max(len(sample), 1)  # every query ranks all entities: the same work each, in expectation
    all_triples = sum(len(graph.triples(name)) for name in graph.splits)
    parts.add(f"bear sample ({len(sample)} queries x {len(sample.candidates)} entities)", seconds, statements=statements,
              statements_per_second=round(statements / seconds, 1),
              extrapolated_seconds_all_queries=round(per_query * len(queries), 3),
              extrapolated_seconds_paper_protocol=round(per_query * all_triples, 3))

    relations = [r.strip() for r in bear_relations.split(",") if r.strip()]
    if relations:
        result, seconds = timed(torch_device, lambda: bear_ref.bear_dataset(bear_data, loaded, relations=relations, show_progress=False))
        parts.add(f"bear data set ({', '.join(relations)})", seconds, bear_score=result.metrics["accuracy_mean"])
        try:
            from bench_bear_dataset import run_lm_pub_quiz  # run as a script: benchmarks/ is on sys.path

            from kg_data.bear import load_bear_dataset

            subset = load_bear_dataset(bear_data, relations=relations)
            lpq_seconds, _ = run_lm_pub_quiz(subset, loaded, lm_pub_quiz_batch_size)
            parts.add(f"lm-pub-quiz 0.3.3 on the same relations (batch {lm_pub_quiz_batch_size})", lpq_seconds)
        except ImportError as error:
            parts.add("lm-pub-quiz 0.3.3", 0.0, skipped=f"not installed ({error})")

    if with_vllm is None:
        with_vllm = importlib.util.find_spec("vllm") is not None
    if with_vllm:
        vllm_parts(parts, loaded, parse_key_values(vllm_args, "--vllm-model-arg"), queries, templates, probe, bear_data,
                   relations[:1], torch_device)

    report = {
        "device": torch.cuda.get_device_name(torch_device) if torch_device.type == "cuda" else platform.processor() or "cpu",
        "model": loaded.metadata(),
        "dtype": str(torch_dtype).replace("torch.", ""),
        "load_seconds": round(loaded.load_seconds, 2),
        "measured_peak_tflops": round(peak / 1e12, 3),
        "flops_per_token": parts.flops_per_token,
        "peak_memory_bytes": peak_memory_bytes(torch_device),
        "settings": {"kg": str(kg), "split": split, "k_shot": k_shot, "bear_sample": bear_sample,
                     "bear_dataset": str(bear_data), "bear_relations": relations, "paper_protocol": paper_protocol,
                     "vllm": with_vllm, "vllm_model_args": list(vllm_args)},
        "parts": parts.rows,
        "versions": package_versions(),
    }
    text = (f"{report['device']}, {report['dtype']}, model {model_name} loaded in {report['load_seconds']} s; measured GEMM "
            f"peak {report['measured_peak_tflops']} TFLOP/s; peak memory {report['peak_memory_bytes'] / 2**30:.2f} GiB\n\n"
            + markdown_table(parts.rows))
    click.echo(text)
    write_json(Path(out_dir) / "bench_gpu.json", report)
    write_text(Path(out_dir) / "bench_gpu.md", text + "\n")


if __name__ == "__main__":
    main()
