"""Agreement between probes on a cloze run's table (``deer.runner.run_cloze``; its metrics are the
result's own, ``deer.platform.metrics.cloze_metrics``) and the benchmark's summary.md."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from deer.platform.metrics import candidate_kind, probes_in
from deer.platform.tables import format_number, markdown_table
from experiments.stats import bootstrap_interval, caveat_lines, pearson_r, rank_correlations, small_sample_note


def cloze_blocks(metrics: dict) -> list[tuple[str, str, str, dict]]:
    """(kind, mode, probe, block) of ``cloze_metrics``' answer, in that order."""
    pairs = sorted({(kind, mode) for kinds in metrics.values() for kind, modes in kinds.items() for mode in modes})
    return [(kind, mode, probe, kinds[kind][mode]) for kind, mode in pairs for probe, kinds in metrics.items()
            if mode in kinds.get(kind, {})]


def accuracy_agreement(correct_a, correct_b) -> dict:
    """Shares of queries both / only a / only b / neither probe got right, and Cohen's kappa."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    n = len(a)
    if n == 0:
        return {"n": 0}
    both, only_a, only_b = float(np.mean(a & b)), float(np.mean(a & ~b)), float(np.mean(~a & b))
    observed = both + float(np.mean(~a & ~b))
    expected = a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean())
    kappa = (observed - expected) / (1 - expected) if expected < 1 else math.nan
    return {"n": n, "both": both, "only_a": only_a, "only_b": only_b, "neither": 1 - both - only_a - only_b,
            "same": observed, "cohen_kappa": float(kappa)}


def pair_agreement(ranks_a, ranks_b, correct_a, correct_b, bootstrap: int = 1000, seed: int = 0) -> dict:
    """Rank and accuracy agreement of two probes on the same queries (rows with both scored)."""
    ranks_a, ranks_b = np.asarray(ranks_a, dtype=float), np.asarray(ranks_b, dtype=float)
    keep = np.isfinite(ranks_a) & np.isfinite(ranks_b)
    n = int(keep.sum())
    if n < 3:
        return {"n": n}
    a, b = ranks_a[keep], ranks_b[keep]
    correlations = rank_correlations(a, b)
    log = correlations["log"]
    interval = bootstrap_interval(pearson_r, np.log10(a), np.log10(b), n_resamples=bootstrap, seed=seed) if bootstrap else {}
    return {
        "n": n, "caveat": small_sample_note(n), "pearson_r_log": log["pearson_r"],
        "pearson_r_log_ci": [interval.get("low"), interval.get("high")] if bootstrap else None,
        "pearson_r": correlations["linear"]["pearson_r"], "spearman_rho": log["spearman_rho"], "kendall_tau": log["kendall_tau"],
        "accuracy": accuracy_agreement(np.asarray(correct_a, dtype=float)[keep] == 1, np.asarray(correct_b, dtype=float)[keep] == 1),
    }


def probe_agreement(table: pd.DataFrame, bootstrap: int = 1000, seed: int = 0) -> list[dict]:
    """One row per (candidate kind, mode, probe pair)."""
    table = table.assign(kind=candidate_kind(table["candidates"]))
    rows = []
    for (kind, mode), part in table.groupby(["kind", "mode"], sort=True):
        for a, b in itertools.combinations(probes_in(table), 2):
            result = pair_agreement(part[f"{a}_rank"], part[f"{b}_rank"], part[f"{a}_correct"], part[f"{b}_correct"], bootstrap, seed)
            rows.append({"kind": kind, "mode": mode, "pair": f"{a} vs {b}", **result})
    return rows


def mode_agreement(table: pd.DataFrame, bootstrap: int = 1000, seed: int = 0) -> list[dict]:
    """Per probe and candidate kind: a fact's template-based rank against its template-free rank."""
    # A fact is its line in its file (row): LAMA files repeat fact ids, which keyed alone would cross-join.
    keys = ["source", "relation", "fact", "row", "candidates"]
    joined = table[table["mode"] == "template"].merge(table[table["mode"] == "template-free"], on=keys, suffixes=("_template", "_free"))
    if not len(joined):
        return []
    joined["kind"] = candidate_kind(joined["candidates"])
    rows = []
    for kind, part in joined.groupby("kind", sort=True):
        for probe in probes_in(table):
            result = pair_agreement(part[f"{probe}_rank_template"], part[f"{probe}_rank_free"],
                                    part[f"{probe}_correct_template"], part[f"{probe}_correct_free"], bootstrap, seed)
            rows.append({"kind": kind, "probe": probe, "pair": "template vs template-free", **result})
    return rows


def agreement_markdown(rows: list[dict], first: str) -> list[str]:
    """The agreement rows (n >= 3) as markdown lines; ``first``: the column that names each row."""
    columns = [first, "kind", "pair", "n", "r (log)", "95% CI", "Spearman", "both right", "only first", "only second", "kappa"]
    table = []
    for row in (r for r in rows if r["n"] >= 3):
        ci, acc = row.get("pearson_r_log_ci") or [None, None], row.get("accuracy", {})
        table.append([row[first], row["kind"], row["pair"], row["n"], row.get("pearson_r_log"),
                      f"[{format_number(ci[0], '.2f')}, {format_number(ci[1], '.2f')}]", row.get("spearman_rho"),
                      acc.get("both"), acc.get("only_a"), acc.get("only_b"), acc.get("cohen_kappa")])
    three = dict.fromkeys(["r (log)", "Spearman", "both right", "only first", "only second", "kappa"], ".3f")
    return markdown_table(pd.DataFrame(table, columns=columns), three).splitlines()


def summary_markdown(metrics: dict, probe_rows: list[dict], mode_rows: list[dict]) -> str:
    """P@1 / P@10 / MRR per source (macro P@1 over relations), the random P@1 and the chance-adjusted MRR
    (0 = chance, 1 = perfect), then the agreement tables."""
    rows = [{"candidates": kind, "mode": mode, "probe": probe, "source": source, "relations": b["relations"], "n": b["n"],
             "P@1 (macro)": b["p@1_macro"], "P@1": b["p@1"], "P@10": b["p@10"], "MRR": b["mrr"], "random P@1": b["random_p@1"],
             "adjusted MRR": b["adjusted"]["mrr"]}
            for kind, mode, probe, block in cloze_blocks(metrics) for source, b in block["per_source"].items() if b["n"]]
    formats = {**dict.fromkeys(["P@1 (macro)", "P@1", "P@10", "MRR", "adjusted MRR"], ".3f"), "random P@1": ".4f"}
    lines = markdown_table(rows, formats).splitlines() if rows else []
    lines += ["", "Agreement between probes on the same queries (r: Pearson of log10 ranks; accuracy: P@1 right or not):", ""]
    lines += agreement_markdown(probe_rows, "mode")
    if mode_rows:
        lines += ["", "Template-based vs template-free ranks of the same fact, per probe:", ""]
        lines += agreement_markdown(mode_rows, "probe")
    caveats = caveat_lines(probe_rows, "kind", "mode", "pair") + caveat_lines(mode_rows, "probe", "kind", "pair")
    if caveats:
        lines += ["", "Small samples:", "", *caveats]
    return "\n".join(lines) + "\n"
