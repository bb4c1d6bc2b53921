"""Token-length bias: does a probe rank gold tails with longer names worse?

Paper (500 WN18RR test queries, Fig. 4): BEAR r = 0.48, DEER r = 0.005.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from deer.platform.kg_result import TAIL_TOKEN_RULE
from deer.platform.result import RunResult
from experiments import plots
from experiments.report import ExperimentOutput
from experiments.runs import check_distinct_labels, result_header
from experiments.stats import correlations, small_sample_note

PAPER = {
    "setting": "500 WN18RR test queries; Pearson r between gold tail token length and rank",
    "pearson_r": {"bear": 0.48, "deer": 0.005},
}


def token_bias_rows(run: RunResult, probes: Sequence[str], rank_type: str) -> tuple[list[dict], list[dict]]:
    """(correlation rows, per-token-length rows) of one run."""
    lengths = run.table["tail_tokens"].to_numpy(dtype=np.float64)
    correlation_rows, length_rows = [], []
    for probe in probes:
        ranks = run.ranks(rank_type, probe)
        linear = correlations(lengths, ranks)
        log = correlations(lengths, np.log10(ranks))
        correlation_rows.append({
            "model": run.label, "probe": probe, "n": linear["n"], "caveat": small_sample_note(linear["n"]),
            "pearson_r": linear["pearson_r"], "pearson_p": linear["pearson_p"], "spearman_rho": linear["spearman_rho"],
            "spearman_p": linear["spearman_p"], "pearson_r_log_rank": log["pearson_r"], "pearson_p_log_rank": log["pearson_p"]})
        for length in sorted(set(lengths[np.isfinite(ranks)].astype(int).tolist())):
            group = ranks[(lengths == length) & np.isfinite(ranks)]
            length_rows.append({"model": run.label, "probe": probe, "tail_tokens": length, "n": len(group),
                                "median_rank": float(np.median(group)), "mean_rank": float(np.mean(group)),
                                "hit@10": float(np.mean(group <= 10))})
    return correlation_rows, length_rows


def run_token_bias(runs: Sequence[RunResult], out_dir: Path, rank_type: str = "filtered",
                   probes: Sequence[str] | None = None, settings: dict | None = None) -> dict:
    """Correlate tail token length with rank per run and probe: token_bias.csv/.md, token_bias_by_length.csv/.md,
    token_bias[_MODEL].png and token_bias.json; returns the JSON's dict."""
    check_distinct_labels(runs)  # a figure per label: two runs under one name would overwrite each other's
    output = ExperimentOutput(out_dir, "token_bias")
    all_correlations, all_lengths = [], []
    for run in runs:
        if "tail_tokens" not in run.table.columns or not run.table["tail_tokens"].any():
            raise ValueError(f"{run.folder}: the ranks table has no tail token lengths (run was made without a tokenizer)")
        run_probes = [p for p in (probes or run.probes) if p in run.probes]
        if not run_probes:
            raise ValueError(f"{run.folder}: none of the probes {list(probes or [])} has ranks in this run")
        stale = [p for p in run_probes if run.metadata_of(p).get("tail_token_rule") != TAIL_TOKEN_RULE]
        if stale:
            raise ValueError(f"{run.folder}: its {', '.join(stale)} metadata records no tail-token rule or another one, so its "
                             "tail_tokens may be counted by an older rule (one too many per tail on a SentencePiece tokenizer); "
                             "run its probes again into it (deer probe --out, or this command with --no-cache)")
        correlation_rows, length_rows = token_bias_rows(run, run_probes, rank_type)
        all_correlations += correlation_rows
        all_lengths += length_rows
        output.figure("token_bias" if len(runs) == 1 else f"token_bias_{_slug(run.label)}", lambda run=run, run_probes=run_probes:
                      plots.rank_by_token_length(run.table["tail_tokens"].to_numpy(), {p: run.ranks(rank_type, p) for p in run_probes},
                                                 title=f"{run.label}: {rank_type} rank of the gold tail by its token length"))
    output.table("token_bias", pd.DataFrame(all_correlations), note=f"Pearson/Spearman between gold tail token count and its "
                 f"{rank_type} rank. Paper ({PAPER['setting']}): BEAR r = 0.48, DEER r = 0.005.")
    output.table("token_bias_by_length", pd.DataFrame(all_lengths))
    return output.finish({**result_header("token-bias", runs, rank_type, settings), "correlations": all_correlations,
                          "by_length": all_lengths, "paper": PAPER})


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in label)
