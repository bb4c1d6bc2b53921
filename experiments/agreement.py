"""Agreement between probes: do DEER, BEAR and LAMA rank the same gold tails high?

Per run (model) and probe pair: Pearson r (with p) of the gold ranks in linear and log scale,
Spearman rho, a bootstrap interval for the log-rank r, and how often the two probes agree on a
Hit@k; Hit@1/10/100 of every probe side by side with standard errors; scatter plots of log
rank vs log rank with the Hit@k quadrants marked, faceted by model.

Paper (DEER): Pearson r of log ranks, DEER vs LAMA, from 0.50 (OPT-350M) to 0.80 (OPT-6.7B).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from deer.metrics import rank_metrics
from experiments import plots
from experiments.report import ExperimentOutput
from experiments.runs import ProbeRun
from experiments.stats import bootstrap_interval, pearson_r, rank_correlations

PAIRS = (("deer", "lama"), ("deer", "bear"), ("bear", "lama"))
HIT_KS = (1, 10, 100)
PAPER = {
    "setting": "WN18RR; Pearson r of log ranks, DEER vs LAMA",
    "deer_vs_lama_log_pearson_r": {"opt-350m": 0.50, "opt-6.7b": 0.80},
}


def pair_row(run: ProbeRun, first: str, second: str, rank_type: str, hit_k: int, bootstrap: int, seed: int) -> dict:
    x, y = run.ranks(first, rank_type), run.ranks(second, rank_type)
    both = np.isfinite(x) & np.isfinite(y)
    x, y = x[both], y[both]
    correlation = rank_correlations(x, y)
    interval = bootstrap_interval(pearson_r, np.log10(x), np.log10(y), n_resamples=bootstrap, seed=seed) if bootstrap else {}
    x_hit, y_hit = x <= hit_k, y <= hit_k
    return {
        "model": run.label,
        "pair": f"{first} vs {second}",
        "n": correlation["log"]["n"],
        "pearson_r": correlation["linear"]["pearson_r"],
        "pearson_p": correlation["linear"]["pearson_p"],
        "pearson_r_log": correlation["log"]["pearson_r"],
        "pearson_p_log": correlation["log"]["pearson_p"],
        "pearson_r_log_ci_low": interval.get("low", float("nan")),
        "pearson_r_log_ci_high": interval.get("high", float("nan")),
        "spearman_rho": correlation["linear"]["spearman_rho"],
        "spearman_p": correlation["linear"]["spearman_p"],
        f"both_hit@{hit_k}": float(np.mean(x_hit & y_hit)) if len(x) else float("nan"),
        f"only_{first}_hit@{hit_k}": float(np.mean(x_hit & ~y_hit)) if len(x) else float("nan"),
        f"only_{second}_hit@{hit_k}": float(np.mean(~x_hit & y_hit)) if len(x) else float("nan"),
        f"neither_hit@{hit_k}": float(np.mean(~x_hit & ~y_hit)) if len(x) else float("nan"),
    }


def hits_row(run: ProbeRun, probe: str, rank_type: str) -> dict:
    ranks = run.ranks(probe, rank_type)
    metrics = rank_metrics(ranks[np.isfinite(ranks)], ks=HIT_KS)
    row = {"model": run.label, "probe": probe, "n": metrics["n"]}
    for k in HIT_KS:
        row[f"hit@{k}"] = metrics.get(f"hit@{k}", float("nan"))
        row[f"hit@{k}_se"] = metrics.get(f"hit@{k}_se", float("nan"))
    row["mrr"] = metrics.get("mrr", float("nan"))
    row["mrr_se"] = metrics.get("mrr_se", float("nan"))
    return row


def run_agreement(runs: Sequence[ProbeRun], out_dir: Path, rank_type: str = "filtered", hit_k: int = 10,
                  bootstrap: int = 1000, seed: int = 0, settings: Optional[dict] = None) -> dict:
    """Compare the probes present in each run; write agreement tables, hits table, scatter plot.

    Writes agreement.csv/.md (model x probe pair), hits.csv/.md (model x probe),
    agreement_scatter.png and agreement.json into ``out_dir``; returns the JSON's dict.
    """
    output = ExperimentOutput(out_dir, "agreement")
    pair_rows, hit_rows, panels = [], [], []
    for run in runs:
        present = run.probes()
        pairs = [(a, b) for a, b in PAIRS if a in present and b in present]
        if not pairs:
            raise ValueError(f"{run.folder}: agreement needs two probes' ranks; this run has only {present or 'none'}")
        for first, second in pairs:
            row = pair_row(run, first, second, rank_type, hit_k, bootstrap, seed)
            pair_rows.append(row)
            panels.append({"row": run.label, "column": f"{plots.probe_label(first)} vs {plots.probe_label(second)}",
                           "x": run.ranks(first, rank_type), "y": run.ranks(second, rank_type),
                           "x_label": plots.probe_label(first), "y_label": plots.probe_label(second), "r": row["pearson_r_log"]})
        hit_rows += [hits_row(run, probe, rank_type) for probe in present]
    output.figure("agreement_scatter", plots.log_rank_scatter(panels, hit_k=hit_k))
    output.table("agreement", pd.DataFrame(pair_rows),
                 note=f"Pearson r of {rank_type} gold ranks (linear and log10); CI: 95% bootstrap over queries. "
                      "Paper: DEER vs LAMA log-rank r = 0.50 (OPT-350M) to 0.80 (OPT-6.7B).")
    output.table("hits", pd.DataFrame(hit_rows), note=f"{rank_type} ranks; *_se = standard error of the mean.")
    result = {
        "experiment": "agreement",
        "rank_type": rank_type,
        "hit_k": hit_k,
        "settings": settings or {},
        "runs": {run.label: str(run.folder) for run in runs},
        "pairs": pair_rows,
        "hits": hit_rows,
        "paper": PAPER,
    }
    return output.finish(result)
