"""Benchmark (issue 12): the encoder's tokens/s against its padded-token budget per batch, on the CPU.

The same WN18RR prompts as ``bench_deer_vs_authors.py`` (authors' template style, 500-triple test
subset, seed 0; every prompt encoded whole) are encoded at each budget, the budgets interleaved
over several rounds so that drifts of a shared machine hit all of them alike; the table gives the
median tokens/s per budget and part.  It is what ``deer.backends.batching.CPU_TOKEN_BUDGET`` is chosen
from: on a CPU a smaller batch keeps each layer's activations in cache, while the GEMMs of a few
hundred rows already run at full rate.

    python benchmarks/bench_token_budget.py --queries 60 --entities 200 --rounds 3
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import click
import torch
from bench_deer_vs_authors import authors_style_prompts  # run as a script: benchmarks/ is on sys.path

from deer.backends.batching import CPU_TOKEN_BUDGET
from deer.backends.encoder import PromptEOLEncoder
from deer.backends.models import open_model
from deer.base.files import package_versions, write_json


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--queries", "n_queries", default=60, show_default=True, help="First N query prompts (8-shot, whole).")
@click.option("--entities", "n_entities", default=200, show_default=True, help="First M entity tail prompts.")
@click.option("--budgets", default="256,512,1024,2048,8192", show_default=True, help="Comma-separated token budgets.")
@click.option("--rounds", default=3, show_default=True, help="Interleaved rounds; the median is reported.")
@click.option("--data-dir", default=None)
@click.option("--out", "out_path", default="results/bench_token_budget.json", show_default=True)
def main(model_name, n_queries, n_entities, budgets, rounds, data_dir, out_path):
    load_at_start = os.getloadavg()
    _, templates, parts = authors_style_prompts(n_queries, n_entities, data_dir)
    loaded = open_model(model_name)
    budget_list = [int(b) for b in budgets.split(",")]
    rates: dict[tuple[int, str], list[float]] = {}
    for _ in range(rounds):
        for budget in budget_list:
            for name, texts in parts.items():
                encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, token_budget=budget, show_progress=False,
                                           reuse_prefix=False, special_tokens=templates.prompt_special_tokens)
                started = time.perf_counter()
                encoder.encode(texts)
                rates.setdefault((budget, name), []).append(encoder.stats.as_dict()["tokens"] / (time.perf_counter() - started))
    rows = [{"token_budget": budget, "part": name, "tokens_per_s_median": statistics.median(values), "tokens_per_s": values}
            for (budget, name), values in sorted(rates.items())]
    click.echo(f"{model_name}, torch threads {torch.get_num_threads()}, {len(parts['queries'])} query prompts, "
               f"{len(parts['entities'])} entity prompts, {rounds} rounds, load average at start {load_at_start[0]:.2f}; "
               f"current CPU default {CPU_TOKEN_BUDGET}")
    click.echo(f"{'budget':>7}{'part':>10}{'median tok/s':>14}   rounds")
    for row in rows:
        click.echo(f"{row['token_budget']:>7}{row['part']:>10}{row['tokens_per_s_median']:>14.0f}   "
                   + " ".join(f"{v:.0f}" for v in row["tokens_per_s"]))
    write_json(Path(out_path), {
        "settings": {"model": model_name, "queries": len(parts["queries"]), "entities": len(parts["entities"]),
                     "rounds": rounds, "budgets": budget_list, "templates": templates.to_metadata()},
        "torch_threads": torch.get_num_threads(), "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(), "cpu_default": CPU_TOKEN_BUDGET, "versions": package_versions(), "rows": rows,
    })
    click.echo(f"wrote {out_path}")


if __name__ == "__main__":
    main()
