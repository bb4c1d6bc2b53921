"""Compute time: DEER measured, BEAR measured on query subsets and extrapolated (paper Table 1).

DEER's work is one forward pass per entity and per query plus one similarity search, so it is
timed directly: on all queries and entities, or on a sample and scaled per entity, per query
and per (query, entity) pair -- the output says which.

BEAR's work is one scored statement per (query, candidate).  As in the paper it is timed on
query subsets of increasing size |Q| and extrapolated to every query by a linear fit
time = a + b |Q|; repeating the measurement on fresh subsets gives the fit's spread over runs.
Two BEAR scorers are timed: bear_ref (shared query prefix) and the plain one (one forward pass
per whole statement, as lm-pub-quiz).  To fit on a 2-core CPU, each can be run against a
sample of candidates (bear_ref: ``candidates``; plain: ``plain_statements`` per query); its
times are then scaled by (all entities / statements per query), which assumes time linear in
the number of statements -- true of both scorers up to batching effects.

Paper (DEER): DEER 16 min for all 93,003 WN18RR triples x 40,943 entities with GPT-2 small on
an RTX 3090; BEAR (lm-pub-quiz) extrapolated to 330 days by a linear fit over |Q| = 16..151.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from experiments import plots, reference
from experiments.report import ExperimentOutput
from experiments.runs import restrict_queries
from experiments.stats import repeated_fit_extrapolation

PAPER_QUERY_SIZES = tuple(range(16, 152, 15))  # 16, 31, ..., 151
PAPER = {
    "setting": "all 93,003 WN18RR triples x 40,943 entities, GPT-2 small, RTX 3090",
    "deer_minutes": 16,
    "bear_days_extrapolated": 330,
    "bear_fit_query_sizes": list(PAPER_QUERY_SIZES),
    "speed_up": 330 * 24 * 60 / 16,
}
SCORER_LABELS = {"bear_ref": "BEAR (bear_ref, shared prefix)", "plain": "BEAR (plain, one pass per statement)"}


def target_query_count(kg, target: str) -> int:
    """Queries to extrapolate to: one split, or 'all' triples of every split (the paper's 93,003)."""
    if target == "all":
        return int(sum(len(t) for t in kg.splits.values()))
    return int(len(kg.triples(target)))


def time_deer(all_queries, loaded, templates, rows, n_candidates, n_target_queries: int, seed: int,
              token_budget: int = 8192) -> dict:
    """Run DEER (no embedding cache) on ``rows`` x ``n_candidates``; scale to the full KG.

    Full-size estimate = entities_seconds/entity x all entities + queries_seconds/query x target
    queries + ranking_seconds/(query x entity) x target queries x all entities.
    """
    from deer.probe import run_deer_probe

    queries = restrict_queries(all_queries, rows, n_candidates, seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        run = run_deer_probe(queries, loaded, templates, Path(folder), token_budget=token_budget, use_cache=False,
                             show_progress=False)
    wall = time.perf_counter() - started
    timings = run.metadata["timings"]
    n_entities = all_queries.kg.n_entities
    n_q, n_c = len(queries), len(queries.candidates)
    per_entity = timings["entities_seconds"] / n_c
    per_query = timings["queries_seconds"] / n_q
    per_pair = timings["ranking_seconds"] / (n_q * n_c)
    total = per_entity * n_entities + per_query * n_target_queries + per_pair * n_target_queries * n_entities
    measured = n_c == n_entities and n_q == n_target_queries
    return {
        "queries": n_q, "candidates": n_c, "wall_seconds": wall, "timings": timings, "work": run.metadata["work"],
        "seconds_per_entity": per_entity, "seconds_per_query": per_query, "seconds_per_query_entity_pair": per_pair,
        "total_seconds": total, "measured_at_full_size": measured,
        "basis": "measured on all queries x all entities" if measured else
                 f"measured on {n_q} queries x {n_c} entities, scaled per entity, per query and per pair",
    }


def time_scorer(score: Callable, all_queries, loaded, templates, sizes: Sequence[int], repeats: int,
                n_candidates: Optional[int], statements_per_query: Optional[int], seed: int) -> dict:
    """Seconds of ``score`` on nested query subsets of each size, for ``repeats`` fresh subsets.

    Each time is scaled to all entities: x (n_entities / statements scored per query).
    Returns sizes, raw and scaled times per repeat, and the work reported by the scorer.
    """
    n_entities = all_queries.kg.n_entities
    raw, scaled, work = [], [], []
    for repeat in range(repeats):
        order = np.random.default_rng([seed, repeat]).permutation(len(all_queries))
        raw_times, scaled_times = [], []
        for size in sizes:
            queries = restrict_queries(all_queries, order[:size], n_candidates, seed=seed + repeat)
            per_query = min(statements_per_query or len(queries.candidates), len(queries.candidates))
            started = time.perf_counter()
            done = score(queries, loaded, templates, statements_per_query=statements_per_query, seed=seed + repeat)
            seconds = time.perf_counter() - started
            raw_times.append(seconds)
            scaled_times.append(seconds * n_entities / per_query)
            work.append({"repeat": repeat, "queries": size, "statements_per_query": per_query, "seconds": seconds,
                         **{k: v for k, v in (done or {}).items() if isinstance(v, (int, float))}})
        raw.append(raw_times)
        scaled.append(scaled_times)
    return {"sizes": list(sizes), "raw_times_by_repeat": raw, "times_by_repeat": scaled, "work": work}


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "-"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def run_compute_time(
    kg, loaded, templates, out_dir: Path,
    split: str = "test",
    query_sizes: Sequence[int] = PAPER_QUERY_SIZES,
    candidates: Optional[int] = None,
    repeats: int = 3,
    plain_statements: Optional[int] = 32,
    deer_queries: Optional[int] = None,
    deer_candidates: Optional[int] = None,
    target: str = "all",
    scorers: Sequence[str] = reference.TIMED_SCORERS,
    seed: int = 0,
    warmup: bool = True,
    settings: Optional[dict] = None,
    log=print,
) -> dict:
    """Time DEER and the BEAR scorers on ``kg`` with ``loaded``; write Table 1, fits and plot.

    ``query_sizes``: |Q| values for the BEAR fit; ``candidates``: entities bear_ref ranks per
    query (None: all); ``plain_statements``: statements per query timed for the plain scorer
    (None: as many as bear_ref); ``deer_queries``/``deer_candidates``: DEER's sample (None: all
    queries of ``split`` / all entities); ``target``: 'all' (every triple) or a split name.
    Writes compute_time.csv/.md (Table 1), compute_time_fits.csv/.md, compute_time_fit.png
    and compute_time.json.
    """
    from kg_data import build_queries

    output = ExperimentOutput(out_dir, "compute_time")
    all_queries = build_queries(kg, split)
    n_entities, n_target = kg.n_entities, target_query_count(kg, target)
    sizes = sorted(set(int(s) for s in query_sizes if 0 < int(s) <= len(all_queries)))
    if len(sizes) < 2:
        raise ValueError(f"need at least two query sizes between 1 and {len(all_queries)} ({split} queries)")
    if warmup:  # first forward passes pay for thread pools and allocations
        restrict_for_warmup = restrict_queries(all_queries, [0], min(8, n_entities), seed)
        with tempfile.TemporaryDirectory() as folder:
            from deer.probe import run_deer_probe

            run_deer_probe(restrict_for_warmup, loaded, templates, Path(folder), use_cache=False, show_progress=False)

    deer_rows = np.arange(len(all_queries)) if deer_queries is None else \
        np.random.default_rng(seed).choice(len(all_queries), size=min(deer_queries, len(all_queries)), replace=False)
    log(f"timing DEER on {len(deer_rows)} queries x {deer_candidates or n_entities} entities")
    deer = time_deer(all_queries, loaded, templates, deer_rows, deer_candidates, n_target, seed)
    table_rows = [{
        "method": "DEER", "time_per_query_s": deer["total_seconds"] / n_target, "total_seconds": deer["total_seconds"],
        "total": _duration(deer["total_seconds"]), "total_std_over_runs": float("nan"), "speed_up_vs_deer": 1.0,
        "basis": deer["basis"],
    }]
    scorer_results, fit_rows, curves, unavailable = {}, [], [], {}
    for scorer in scorers:
        try:
            score = reference.timing_scorer(scorer)
        except reference.ReferenceUnavailable as error:
            unavailable[scorer] = str(error)
            log(f"skipping {scorer}: {error}")
            continue
        per_query = plain_statements if scorer == "plain" else None
        scorer_candidates = None if scorer == "plain" else candidates
        log(f"timing {scorer} on |Q| = {', '.join(map(str, sizes))} x {repeats} runs")
        if warmup:
            score(restrict_queries(all_queries, [0], min(8, n_entities), seed), loaded, templates, statements_per_query=2)
        timing = time_scorer(score, all_queries, loaded, templates, sizes, repeats, scorer_candidates, per_query, seed)
        extrapolation = repeated_fit_extrapolation(sizes, timing["times_by_repeat"], n_target)
        statements = sorted(set(w["statements_per_query"] for w in timing["work"]))
        basis = (f"linear fit over |Q| = {sizes[0]}..{sizes[-1]} x {repeats} runs; "
                 f"{'/'.join(map(str, statements))} statements per query timed, scaled to {n_entities} entities")
        scorer_results[scorer] = {**timing, "extrapolation": extrapolation, "basis": basis}
        fit = extrapolation["pooled_fit"]
        total = extrapolation["prediction"]
        table_rows.append({
            "method": SCORER_LABELS[scorer], "time_per_query_s": total / n_target, "total_seconds": total,
            "total": _duration(total), "total_std_over_runs": extrapolation["per_repeat_predictions"]["std"],
            "speed_up_vs_deer": total / deer["total_seconds"], "basis": basis,
        })
        fit_rows.append({
            "scorer": scorer, "slope_s_per_query": fit["slope"], "slope_se": fit["slope_se"],
            "intercept_s": fit["intercept"], "intercept_se": fit["intercept_se"], "r_squared": fit["r_squared"],
            "target_queries": n_target, "prediction_s": total, "prediction_se": extrapolation["prediction_se"],
            "per_run_mean_s": extrapolation["per_repeat_predictions"]["mean"],
            "per_run_std_s": extrapolation["per_repeat_predictions"]["std"],
        })
        curves.append({"scorer": SCORER_LABELS[scorer], "sizes": sizes, "times_by_repeat": timing["times_by_repeat"],
                       "slope": fit["slope"], "intercept": fit["intercept"]})

    table_note = (
        f"Total = all {n_target} {'triples' if target == 'all' else target + ' queries'} x {n_entities} entities, "
        f"model {loaded.name} on {loaded.device} ({loaded.dtype}). BEAR totals are extrapolated (see basis); "
        f"times per query for BEAR are scaled from the statements actually timed to all entities. "
        f"Paper: DEER 16 min, BEAR 330 days ({PAPER['setting']})."
    )
    output.table("compute_time", pd.DataFrame(table_rows), note=table_note)
    if fit_rows:
        output.table("compute_time_fits", pd.DataFrame(fit_rows),
                     note="time (s, scaled to all entities) = intercept + slope x |Q|; se from the pooled fit's "
                          "residuals; per_run_* = spread of the extrapolation over repeated runs.")
        output.figure("compute_time_fit", plots.compute_time_fits(curves))
    result = {
        "experiment": "compute-time",
        "settings": {**(settings or {}), "split": split, "query_sizes": sizes, "candidates": candidates,
                     "repeats": repeats, "plain_statements": plain_statements, "deer_queries": deer_queries,
                     "deer_candidates": deer_candidates, "target": target, "seed": seed},
        "model": loaded.metadata(),
        "kg": kg.summary(),
        "target_queries": n_target,
        "entities": n_entities,
        "table": table_rows,
        "deer": deer,
        "scorers": scorer_results,
        "unavailable": unavailable,
        "paper": PAPER,
    }
    return output.finish(result)
