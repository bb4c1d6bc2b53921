"""Dtype by evidence (issue 23): DEER, LAMA and BEAR in bfloat16 and float16 against float32.

What ``--dtype auto`` should pick on a GPU is a question of numbers, not speed: this study runs the
probes with the weights and activations in each dtype (on the CPU, where all three run, slowly) and
compares every rank and prediction with float32's.  Log-softmax is taken in float32 in every dtype
(``deer.backends.encoder.next_token_log_softmax`` upcasts the logits), as the scorers always do.

* WN18RR: ``--queries`` test triples (seed 0), ranked among their entities (the paper's protocol).
  DEER and LAMA rank all of them; BEAR (queries x candidates statements) the first ``--bear-queries``
  of the same queries, among the same candidates.
* The BEAR data set: ``--relations`` (every instance, every template).

Per probe and dtype: Spearman of the filtered gold ranks with float32's, Hit@10 (accuracy on the data
set) in both, and the share of queries whose argmax prediction changed ("flipped"). Finished
(dtype, probe) parts are kept under ``--out``/parts, keyed by the settings, so a stopped study resumes.

    python benchmarks/bench_dtype.py --queries 200 --bear-queries 40 --relations P30,P36 --out results/dtype-study
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import click
import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

import bear_ref
import deer
from deer.backends.models import open_model
from deer.base.files import package_versions, read_table, write_json, write_table, write_text
from deer.platform.tables import markdown_table
from experiments.runs import restrict_queries

DTYPES = ("float32", "bfloat16", "float16")


PROBES = ("deer", "lama", "bear", "bear-dataset")


def part_table(probe: str, loaded, queries, bear_queries, relations: list[str]) -> pd.DataFrame:
    """One probe's rows: the gold rank and the argmax prediction (and, on the data set, whether it is right)."""
    if probe == "bear-dataset":
        result = bear_ref.bear_dataset("bear", loaded, relations=relations, show_progress=False)
        return result.table.rename(columns={"predicted_id": "predicted"})[["rank", "predicted", "correct"]]
    run = {"deer": lambda: deer.probe(queries, loaded, show_progress=False),
           "lama": lambda: bear_ref.lama(queries, loaded, show_progress=False),
           "bear": lambda: bear_ref.bear(bear_queries, loaded, show_progress=False)}[probe]
    result = run()
    top = result.table[f"{probe}_top10"].str.split(" | ", regex=False).str[0]
    return pd.DataFrame({"rank": result.ranks("filtered"), "predicted": top})


def compare(reference: pd.DataFrame, other: pd.DataFrame, probe: str, dtype: str, seconds: float) -> dict:
    ranks_32, ranks = reference["rank"].to_numpy(float), other["rank"].to_numpy(float)
    measure = "accuracy" if probe == "bear-dataset" else "hit@10"

    def score(table, ranks_):
        return float(np.mean(table["correct"])) if probe == "bear-dataset" else float(np.mean(ranks_ <= 10))

    return {
        "probe": probe, "dtype": dtype, "n": len(ranks), "measure": measure,
        "float32": score(reference, ranks_32), "this_dtype": score(other, ranks),
        "spearman_vs_float32": float(scipy_stats.spearmanr(ranks_32, ranks).statistic) if dtype != "float32" else 1.0,
        "flipped_predictions": float(np.mean(reference["predicted"].to_numpy() != other["predicted"].to_numpy())),
        "rank_changed": float(np.mean(ranks_32 != ranks)),
        "max_abs_log10_rank_change": float(np.max(np.abs(np.log10(ranks_32) - np.log10(ranks)))),
        "seconds": round(seconds, 1),
    }


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--queries", "n_queries", default=200, show_default=True, help="WN18RR test triples (seed 0): DEER and LAMA.")
@click.option("--bear-queries", default=40, show_default=True, help="The first N of them for BEAR (queries x candidates statements).")
@click.option("--relations", default="P30,P36", show_default=True, help="BEAR data-set relations.")
@click.option("--dtypes", default=",".join(DTYPES), show_default=True)
@click.option("--out", "out_dir", default="results/dtype-study", show_default=True)
def main(model_name, n_queries, bear_queries, relations, dtypes, out_dir):
    dtypes = [d.strip() for d in dtypes.split(",") if d.strip()]
    if dtypes[0] != "float32":
        raise click.BadParameter("the first dtype is the reference: float32", param_hint="--dtypes")
    relation_list = [r.strip() for r in relations.split(",") if r.strip()]
    settings = {"model": model_name, "queries": n_queries, "bear_queries": bear_queries, "relations": relation_list, "seed": 0}
    parts = Path(out_dir) / "parts" / hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    queries = deer.load_queries("wn18rr", subset=n_queries, seed=0)
    bear_subset = restrict_queries(queries, range(min(bear_queries, len(queries))), None, 0)
    tables, seconds = {}, {}
    for dtype in dtypes:
        done = {p: parts / f"{dtype}-{p}.parquet" for p in PROBES}
        loaded = None
        for probe in (p for p, path in done.items() if not path.exists()):  # each part kept as it finishes
            if loaded is None:
                loaded = open_model(model_name, dtype=dtype)
            click.echo(f"{dtype}: {probe} ({len(queries)} queries, {len(bear_subset)} for BEAR, relations {relations})")
            started = time.perf_counter()
            table = part_table(probe, loaded, queries, bear_subset, relation_list)
            write_json(parts / f"{dtype}-{probe}.json", {"seconds": time.perf_counter() - started})
            write_table(done[probe], table)
        for probe, path in done.items():
            tables[dtype, probe] = read_table(path)
            seconds[dtype, probe] = json.loads((parts / f"{dtype}-{probe}.json").read_text())["seconds"]
    rows = [compare(tables["float32", probe], tables[dtype, probe], probe, dtype, seconds[dtype, probe])
            for probe in PROBES for dtype in dtypes]
    table = pd.DataFrame(rows)[["probe", "dtype", "n", "measure", "float32", "this_dtype", "spearman_vs_float32",
                                "flipped_predictions", "rank_changed", "max_abs_log10_rank_change", "seconds"]]
    text = markdown_table(table, {"float32": ".3f", "this_dtype": ".3f", "spearman_vs_float32": ".4f",
                                  "flipped_predictions": ".3f", "rank_changed": ".3f", "max_abs_log10_rank_change": ".3f"})
    click.echo(text)
    write_json(Path(out_dir) / "dtype.json", {"settings": settings, "rows": rows, "versions": package_versions(),
                                              "note": "CPU run; seconds are CPU seconds, not GPU timings"})
    write_text(Path(out_dir) / "dtype.md", text + "\n")


if __name__ == "__main__":
    main()
