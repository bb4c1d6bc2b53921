"""Checkpoint screening: which of many models knows most of the KG, by DEER (and does a reference probe agree)?"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from deer.base.files import toolkit_version
from deer.platform.metrics import adjusted_index, rank_metrics
from deer.platform.result import RunResult
from experiments import plots
from experiments.report import ExperimentOutput
from experiments.runs import check_distinct_labels, result_header, same_weights
from experiments.stats import ordering_agreement

METRICS = ("hit@1", "hit@3", "hit@10", "hit@100", "mrr")


def leaderboard_row(run: RunResult, probe: str, rank_type: str) -> dict:
    ranks = run.ranks(rank_type, probe)
    metrics = rank_metrics(ranks[np.isfinite(ranks)])
    probe_metadata = run.probe_metadata.get(probe, {})
    cache = probe_metadata.get("cache", {})
    row = {"model": run.label, "probe": probe, "n": metrics["n"]}
    for name in METRICS:
        row[name] = metrics.get(name, float("nan"))
        if f"{name}_se" in metrics:
            row[f"{name}_se"] = metrics[f"{name}_se"]
    row["mr"] = metrics.get("mr", float("nan"))
    # Chance-adjusted (deer.platform.metrics.adjusted_index): comparable across runs whose candidate counts differ.
    baseline = run.probe_metrics.get(probe, {}).get("random_baseline", {}).get(rank_type)
    if baseline and baseline.get("n") == metrics["n"]:
        row.update({f"{name}_adjusted": value for name, value in adjusted_index(metrics, baseline).items()})
    row["parameters"] = probe_metadata.get("model", {}).get("parameters")
    row["seconds"] = run.experiment.get("probe_seconds", {}).get(probe)
    if probe == "deer":
        encoded = (cache.get("entities_encoded_now", 0) or 0) + (cache.get("queries_encoded_now", 0) or 0)
        from_cache = (cache.get("entities_from_cache", 0) or 0) + (cache.get("queries_from_cache", 0) or 0)
        probed_now = probe in run.experiment.get("probe_seconds", {}) and probe not in run.experiment.get("reused", ())
        if not probed_now:  # read back: nothing encoded now
            encoded, from_cache = 0, encoded + from_cache
        row["encoded_now"], row["from_cache"] = encoded, from_cache
    return row


def _probe_settings(run: RunResult, probe: str | None) -> dict:
    """A probe's recorded options, backend and toolkit version: what may make its scores differ."""
    metadata = run.probe_metadata.get(probe, {})
    made_by = {"backend": metadata.get("backend"), "toolkit": toolkit_version(metadata)}
    return {**(metadata.get("options") or {}), **{name: value for name, value in made_by.items() if value}}


def run_screen(runs: Sequence[RunResult], out_dir: Path, reference: str | None = None, metric: str = "hit@10",
               rank_type: str = "filtered", settings: dict | None = None, steps: dict[str, int | None] | None = None) -> dict:
    """Leaderboard of ``runs`` by DEER ``metric`` and its ordering agreement with ``reference``: leaderboard.csv/.md/.png,
    leaderboard_<reference>.csv/.md, ordering_agreement.csv/.md and screen.json; returns the JSON's dict.  ``steps``
    ({run label: training step}): also curves.csv/.md/.png, every metric against the step."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}")
    check_distinct_labels(runs)  # two runs under one name would swap rows (reference, steps, JSON keys)
    for other in runs[1:]:  # a leaderboard labelled by model must differ by model alone: same queries, templates, options
        differs = other.spec.differences(runs[0].spec)
        if differs.keys() & {"kg_fingerprint", "split", "queries"}:
            raise ValueError(f"{runs[0].folder} and {other.folder} ranked different queries (another KG, split, subset or "
                             "candidates); screen models on one query set: runs made with the same --kg/--split/--subset/--seed")
        options = [(f"{probe} {name}", (mine, theirs[name])) for probe in ("deer", reference)
                   for name, mine in _probe_settings(runs[0], probe).items()
                   if name in (theirs := _probe_settings(other, probe)) and mine != theirs[name]]
        setting = [(key, values[::-1]) for key, values in differs.items() if key.startswith("templates")] + options
        if setting:
            raise ValueError(f"{runs[0].folder} and {other.folder} were made with other settings ("
                             + "; ".join(f"{key}: {a!r} and {b!r}" for key, (a, b) in setting)
                             + "); screen models probed alike: runs made with the same templates, probe options, backend and toolkit version")
    for probe in ["deer"] + ([reference] if reference else []):  # checked before anything is written
        missing = [run.label for run in runs if probe not in run.probes]
        if missing:
            raise ValueError(f"no {'DEER' if probe == 'deer' else probe} ranks for: {', '.join(missing)}")
    output = ExperimentOutput(out_dir, "screen")

    def best_first(row: dict) -> tuple:  # higher first, a NaN (no finite rank) last
        return bool(np.isnan(row[metric])), -row[metric]

    deer_rows = sorted((leaderboard_row(run, "deer", rank_type) for run in runs), key=best_first)
    repeats = same_weights(runs)  # byte-identical weights under two names: one model, not two results
    for row in deer_rows:  # equal scores share a place (1, 1, 3): a tie is not broken by another metric
        row["place"] = 1 + sum(best_first(other) < best_first(row) for other in deer_rows)
        row["same_weights_as"] = repeats.get(row["model"], "")
    deer_table = pd.DataFrame(deer_rows)
    deer_table = deer_table[["place"] + [c for c in deer_table.columns if c != "place"]]
    output.table("leaderboard", deer_table, note=f"DEER, {rank_type} ranks, sorted by {metric} (equal scores share a place); *_se = standard error; "
                 "*_adjusted = chance-adjusted index (0 = random ranking, 1 = perfect; comparable across candidate counts); "
                 "same_weights_as = an earlier row with the same run spec (identical weights): the same model, probed once.")
    output.figure("leaderboard", lambda: plots.leaderboard_bars(
        [r["model"] for r in deer_rows], [r[metric] for r in deer_rows],
        [r.get(f"{metric}_se", 0.0) for r in deer_rows], f"DEER {metric} ({rank_type})"))
    result = {**result_header("screen", runs, rank_type, settings), "metric": metric, "leaderboard": deer_rows,
              "same_weights": repeats}
    boards = {"deer": deer_rows}  # probe -> its leaderboard rows, which the curves repeat
    if reference:
        by_label = {run.label: run for run in runs}
        reference_rows = sorted((leaderboard_row(by_label[r["model"]], reference, rank_type) for r in deer_rows),
                                key=best_first)
        output.table(f"leaderboard_{reference}", pd.DataFrame(reference_rows))
        boards[reference] = reference_rows
        reference_scores = {r["model"]: r for r in reference_rows}
        labels = [r["model"] for r in deer_rows]
        orderings = {name: ordering_agreement([r[name] for r in deer_rows], [reference_scores[label][name] for label in labels],
                                              labels) for name in METRICS}
        result.update(reference=reference, reference_leaderboard=reference_rows, ordering_agreement=orderings)
        output.table("ordering_agreement", pd.DataFrame(
            [{"metric": name, "n_models": o["n_models"], "spearman_rho": o["spearman_rho"], "spearman_p": o["spearman_p"],
              "kendall_tau": o["kendall_tau"], "kendall_p": o["kendall_p"],
              "deer_order": " > ".join(o["order_a"]), f"{reference}_order": " > ".join(o["order_b"])}
             for name, o in orderings.items()]),
            note=f"Rank correlation between the model orderings of DEER and {reference.upper()} by each metric.")
    if steps and any(step is not None for step in steps.values()):
        result["curves"] = write_curves(output, runs, steps, boards, rank_type)
    return output.finish(result)


def write_curves(output: ExperimentOutput, runs: Sequence[RunResult], steps: dict[str, int | None],
                 boards: dict[str, list[dict]], rank_type: str) -> list[dict]:
    """Every metric of every probe's leaderboard per checkpoint by training step (one without a step: table only)."""
    by_label = {probe: {row["model"]: row for row in board} for probe, board in boards.items()}
    rows = [{"checkpoint": run.label, "step": steps.get(run.label),
             **{f"{probe} {name}": found[run.label][name] for probe, found in by_label.items() for name in (*METRICS, "mr")}}
            for run in runs]
    rows.sort(key=lambda r: (r["step"] is None, r["step"] if r["step"] is not None else 0))
    output.table("curves", pd.DataFrame(rows), note=f"{rank_type} ranks per checkpoint, by training step.")
    stepped = [r for r in rows if r["step"] is not None]
    series = {f"{name} | {probe}": [r[f"{probe} {name}"] for r in stepped] for name in ("hit@1", "hit@10", "mrr", "mr") for probe in boards}
    output.figure("curves", lambda: plots.metric_curves([r["step"] for r in stepped], series, f"{rank_type} ranks by checkpoint"))
    return rows
