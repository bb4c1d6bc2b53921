"""Agreement between probes: do DEER, BEAR and LAMA rank the same gold tails high?

Paper (DEER): Pearson r of log ranks, DEER vs LAMA, from 0.50 (OPT-350M) to 0.80 (OPT-6.7B), with LAMA's
own single-token protocol; which protocol a run's LAMA used is written beside every LAMA number.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from deer.platform.metrics import rank_metrics
from deer.platform.result import RunResult
from experiments import plots
from experiments.report import ExperimentOutput
from experiments.runs import check_distinct_labels, result_header
from experiments.stats import NAN, bootstrap_interval, finite_pairs, pearson_r, rank_correlations, small_sample_note

PAIRS = (("deer", "lama"), ("deer", "bear"), ("bear", "lama"))  # the paper's pairs first, in its order
HIT_KS = (1, 10, 100)
LAMA_PROTOCOLS = {
    "single-token": "single-token names only (candidates and gold tails whose name is one token)",
    "first-token": "every name, multi-token names ranked by their first token (not LAMA's own protocol)",
}
PAPER = {
    "setting": "WN18RR; Pearson r of log ranks, DEER vs LAMA",
    "deer_vs_lama_log_pearson_r": {"opt-350m": 0.50, "opt-6.7b": 0.80},
    "lama_protocol": "single-token",
    "lama_protocol_detail": "single-token names only: 596 WN18RR test queries x 4,948 entities",
}
PAPER_PAIRS = {"deer vs lama": "0.50 (OPT-350M) .. 0.80 (OPT-6.7B)"}
PAPER_PAIR_PROTOCOL = "LAMA single-token (596 queries x 4,948 entities)"
WN18RR_FINGERPRINT = "e987fa4ff860fefa"  # the KG fingerprint of WN18RR (kg_data/manifest.json's files) as its reader reads it


def on_paper_queries(run: RunResult, probe: str) -> bool:
    """Whether ``probe``'s ranks in ``run`` are on the paper's queries: WN18RR's test split (and data, where recorded)."""
    metadata = run.metadata_of(probe)
    kg = metadata.get("kg") if isinstance(metadata.get("kg"), dict) else {}
    fingerprint = run.spec.kg_fingerprint if run.spec is not None else None
    return kg.get("name") == "wn18rr" and metadata.get("split") == "test" and fingerprint in (None, WN18RR_FINGERPRINT)


def lama_protocol(run: RunResult) -> str | None:
    """'single-token' or 'first-token' for the run's LAMA ranks (None: no LAMA in the run)."""
    if "lama" not in run.probes:
        return None
    lama = run.probe_metadata.get("lama", {})
    return "single-token" if isinstance(lama, dict) and lama.get("single_token") else "first-token"


def run_candidates(run: RunResult) -> int | None:
    """Candidates ranked per query in the run (from any probe's metadata)."""
    for probe in run.probes:
        block = run.probe_metadata.get(probe)
        if isinstance(block, dict) and block.get("candidates") is not None:
            return int(block["candidates"])
    return None


def pair_row(run: RunResult, first: str, second: str, rank_type: str, hit_k: int, bootstrap: int, seed: int) -> dict:
    x, y = finite_pairs(run.ranks(rank_type, first), run.ranks(rank_type, second))
    correlation = rank_correlations(x, y)
    linear, log = correlation["linear"], correlation["log"]
    interval = bootstrap_interval(pearson_r, np.log10(x), np.log10(y), n_resamples=bootstrap, seed=seed) if bootstrap else {}
    x_hit, y_hit = x <= hit_k, y <= hit_k
    quadrants = {"both": x_hit & y_hit, f"only_{first}": x_hit & ~y_hit, f"only_{second}": ~x_hit & y_hit,
                 "neither": ~x_hit & ~y_hit}
    pair = f"{first} vs {second}"
    protocol = lama_protocol(run) if "lama" in (first, second) else None
    paper = PAPER_PAIRS.get(pair) if on_paper_queries(run, first) else None  # the paper's number: only on its queries
    return {
        "model": run.label, "pair": pair, "lama_protocol": protocol, "n": log["n"], "caveat": small_sample_note(log["n"]),
        "candidates": run_candidates(run),
        "pearson_r": linear["pearson_r"], "pearson_p": linear["pearson_p"],
        "pearson_r_log": log["pearson_r"], "pearson_p_log": log["pearson_p"],
        "pearson_r_log_ci_low": interval.get("low", NAN), "pearson_r_log_ci_high": interval.get("high", NAN),
        "spearman_rho": linear["spearman_rho"], "spearman_p": linear["spearman_p"],
        **{f"{name}_hit@{hit_k}": float(np.mean(hit)) if len(x) else NAN for name, hit in quadrants.items()},
        "paper_pearson_r_log": paper, "paper_protocol": PAPER_PAIR_PROTOCOL if paper else None,
        "same_protocol_as_paper": (paper is not None and protocol == PAPER["lama_protocol"]) if pair in PAPER_PAIRS else None,
    }


def hits_row(run: RunResult, probe: str, rank_type: str) -> dict:
    ranks = run.ranks(rank_type, probe)
    metrics = rank_metrics(ranks[np.isfinite(ranks)], ks=HIT_KS)
    values = {key: metrics.get(key, NAN) for name in (*(f"hit@{k}" for k in HIT_KS), "mrr") for key in (name, f"{name}_se")}
    return {"model": run.label, "probe": probe, "n": metrics["n"], **values, "candidates": run_candidates(run),
            "lama_protocol": lama_protocol(run) if probe == "lama" else None}


def run_agreement(runs: Sequence[RunResult], out_dir: Path, rank_type: str = "filtered", hit_k: int = 10,
                  bootstrap: int = 1000, seed: int = 0, settings: dict | None = None,
                  probes: Sequence[str] | None = None) -> dict:
    """Compare the probes (of ``probes``, None: all) in each run: write agreement.csv/.md (model x probe pair),
    hits.csv/.md (model x probe), agreement_scatter.png and agreement.json; returns the JSON's dict."""
    check_distinct_labels(runs)  # the rows, facets and JSON keys name runs by label
    output = ExperimentOutput(out_dir, "agreement")
    pair_rows, hit_rows, panels = [], [], []
    for run in runs:
        present = [probe for probe in run.probes if probes is None or probe in probes]
        pairs = [(a, b) for a, b in PAIRS if a in present and b in present]
        pairs += [(a, b) for a, b in itertools.combinations(present, 2) if (a, b) not in pairs and (b, a) not in pairs]
        if not pairs:
            raise ValueError(f"{run.folder}: agreement needs two probes' ranks; this run has {run.probes or 'none'}"
                             + ("" if probes is None else f", of the probes asked for: {present or 'none'}"))
        for first, second in pairs:
            row = pair_row(run, first, second, rank_type, hit_k, bootstrap, seed)
            pair_rows.append(row)
            panels.append({"row": run.label, "column": f"{plots.probe_label(first)} vs {plots.probe_label(second)}",
                           "x": run.ranks(rank_type, first), "y": run.ranks(rank_type, second),
                           "x_label": plots.probe_label(first), "y_label": plots.probe_label(second), "r": row["pearson_r_log"]})
        hit_rows += [hits_row(run, probe, rank_type) for probe in present]
    output.figure("agreement_scatter", lambda: plots.log_rank_scatter(panels, hit_k=hit_k))
    protocol_note = "; ".join(f"{p} = {LAMA_PROTOCOLS[p]}" for p in sorted({lama_protocol(run) for run in runs} - {None}))
    pairs_frame = pd.DataFrame(pair_rows)
    paper_columns = ["paper_pearson_r_log", "paper_protocol", "same_protocol_as_paper"]
    pairs_frame = pairs_frame[[c for c in pairs_frame.columns if c not in paper_columns] + paper_columns]
    output.table("agreement", pairs_frame,
                 note=f"Pearson r of {rank_type} gold ranks (linear and log10); CI: 95% bootstrap over queries. "
                      f"Paper: DEER vs LAMA log-rank r = 0.50 (OPT-350M) to 0.80 (OPT-6.7B) with "
                      f"{PAPER['lama_protocol_detail']}. lama_protocol: the protocol of this row's LAMA ranks"
                      f"{' (' + protocol_note + ')' if protocol_note else ''}; same_protocol_as_paper says whether "
                      f"the row can be set beside the paper's number.")
    output.table("hits", pd.DataFrame(hit_rows),
                 note=f"{rank_type} ranks; *_se = standard error of the mean; lama_protocol as in agreement.md.")
    return output.finish({**result_header("agreement", runs, rank_type, settings), "hit_k": hit_k,
                          "lama_protocols": {run.label: lama_protocol(run) for run in runs},
                          "lama_protocol_descriptions": LAMA_PROTOCOLS, "pairs": pair_rows, "hits": hit_rows, "paper": PAPER})
