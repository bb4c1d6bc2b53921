"""Compute time: DEER measured, BEAR measured on query subsets and extrapolated (paper Table 1).

DEER is timed directly, on all queries and entities or on a sample scaled per entity, per query and per
(query, entity) pair.  BEAR, as in the paper, is timed on independent random query subsets of increasing
size |Q| and extrapolated by an OLS fit time = a + b |Q|; with C of N candidates only the per-statement part
is scaled to N (``extrapolation_method`` says how, in words).

Paper: DEER 16 min for all 93,003 WN18RR triples x 40,943 entities with GPT-2 small on an RTX 3090; BEAR
(lm-pub-quiz) extrapolated to 330 days by a linear fit over |Q| = 16..151.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from deer.api import probe as deer_probe
from deer.backends import open_backend
from deer.platform.length_guard import guard_lengths
from deer.platform.task_texts import kg_benchmark_task
from deer.platform.validate import warn
from deer.probes import get_probe
from experiments import plots, reference
from experiments.report import ExperimentOutput
from experiments.runs import restrict_queries
from experiments.stats import NAN, linear_fit, repeated_fit_extrapolation

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
    """Queries to extrapolate to: one split's, or 'all' triples of every split (the paper's 93,003)."""
    count = int(sum(len(t) for t in kg.splits.values())) if target == "all" else int(len(kg.triples(target)))
    if not count:
        with_triples = ", ".join(split for split, triples in kg.splits.items() if len(triples))
        raise ValueError(f"--target {target}: the {target} split of {kg.source or kg.name} has no triples to extrapolate "
                         f"the time to; name a split with triples ({with_triples}) or 'all'")
    return count


def time_deer(all_queries, loaded, templates, rows, n_candidates, n_target_queries: int, seed: int,
              token_budget: int | None = None) -> dict:
    """Run DEER (no embedding cache) on ``rows`` x ``n_candidates``, scaled to the full KG."""
    queries = restrict_queries(all_queries, rows, n_candidates, seed)
    started = time.perf_counter()
    run = deer_probe(queries, loaded, templates=templates, token_budget=token_budget, show_progress=False)
    wall = time.perf_counter() - started
    # The probe's perf_counter stage times, unrounded: the ranking stage is scaled by ~1e5x.
    timings = {k: float(v) for k, v in run.metadata["timings"].items()}
    n_entities = all_queries.kg.n_entities
    n_q, n_c = len(queries), len(queries.candidates)
    per_entity = timings["entities_seconds"] / n_c
    per_query = timings["queries_seconds"] / n_q
    per_pair = timings["ranking_seconds"] / (n_q * n_c)
    total = per_entity * n_entities + per_query * n_target_queries + per_pair * n_target_queries * n_entities
    measured = n_c == n_entities and n_q == n_target_queries
    return {
        "queries": n_q, "candidates": n_c, "wall_seconds": wall, "timings": timings, "work": run.metadata["work"],
        "token_budget": run.metadata["token_budget"],
        "seconds_per_entity": per_entity, "seconds_per_query": per_query, "seconds_per_query_entity_pair": per_pair,
        "total_seconds": total, "measured_at_full_size": measured,
        "basis": "measured on all queries x all entities (time.perf_counter)" if measured else
                 f"measured on {n_q} queries x {n_c} entities (time.perf_counter), scaled per entity, per query "
                 f"and per (query, entity) pair",
    }


def _timed(score: Callable, queries, loaded, templates, statements_per_query: int | None, seed: int) -> tuple[float, dict]:
    started = time.perf_counter()
    done = score(queries, loaded, templates, statements_per_query=statements_per_query, seed=seed)
    return time.perf_counter() - started, {k: v for k, v in (done or {}).items() if isinstance(v, (int, float))}


def time_scorer(score: Callable, all_queries, loaded, templates, sizes: Sequence[int], repeats: int,
                n_candidates: int | None, statements_per_query: int | None, seed: int,
                split_context: bool = True) -> dict:
    """Seconds of ``score`` on a fresh query sample per repeat and size, brought to all entities: per size and
    repeat as measured (raw_), against all entities, and its context_/statement_ parts; one work record per point.
    ``split_context``: scale only the per-statement part (bear_ref)."""
    n_entities = all_queries.kg.n_entities
    points, work = [], []  # points: (raw, all entities, context, statements) seconds per (repeat, size)
    for repeat in range(repeats):
        for size_index, size in enumerate(sizes):
            sample_seed = int(np.random.default_rng([seed, repeat, size_index]).integers(2**31 - 1))  # one per fit point
            rows = np.sort(np.random.default_rng(sample_seed).choice(len(all_queries), size=size, replace=False))
            queries = restrict_queries(all_queries, rows, n_candidates, seed=sample_seed)
            per_query = min(statements_per_query or len(queries.candidates), len(queries.candidates))
            seconds, done = _timed(score, queries, loaded, templates, statements_per_query, sample_seed)
            record = {"repeat": repeat, "queries": size, "candidates": len(queries.candidates),
                      "statements_per_query": per_query, "seconds": seconds, **done}
            if per_query >= n_entities:
                context, statements, scaling = 0.0, seconds, "measured"
            elif split_context:
                if per_query < 2:
                    raise ValueError("splitting context and statement time needs at least 2 statements per query")
                one_seconds, one_done = _timed(score, queries, loaded, templates, 1, sample_seed)
                per_statement = (seconds - one_seconds) / (size * (per_query - 1))
                context = one_seconds - per_statement * size
                statements = (seconds - context) * n_entities / per_query
                scaling = "context part + per-statement part x N/C"
                record.update({"seconds_one_statement_per_query": one_seconds, "seconds_per_statement": per_statement,
                               "context_seconds": context, "statement_seconds": seconds - context,
                               "one_statement_work": one_done})
            else:
                context, statements, scaling = 0.0, seconds * n_entities / per_query, "whole time x N/C"
            record.update({"scaling": scaling, "seconds_all_entities": context + statements, "query_rows": rows.tolist()})
            work.append(record)
            points.append((seconds, context + statements, context, statements))
    keys = ("raw_times_by_repeat", "times_by_repeat", "context_times_by_repeat", "statement_times_by_repeat")
    series = np.array(points, dtype=np.float64).reshape(repeats, len(sizes), len(keys))
    return {"sizes": list(sizes), **{key: series[..., i].tolist() for i, key in enumerate(keys)}, "work": work}


def extrapolation_method(timing: dict, n_entities: int, n_target: int, repeats: int) -> str:
    """In words, exactly how ``timing`` was brought to all entities and to ``n_target`` queries."""
    sizes = timing["sizes"]
    statements = sorted(set(w["statements_per_query"] for w in timing["work"]))
    candidates = sorted(set(w["candidates"] for w in timing["work"]))
    scalings = set(w["scaling"] for w in timing["work"])
    c_text = f"{statements[0]}" if len(statements) == 1 else f"{statements[0]}..{statements[-1]}"
    fit = (f"OLS time = a + b|Q| over {repeats} x {len(sizes)} independent random query subsets "
           f"(|Q| = {', '.join(map(str, sizes))}; fresh queries for every point, not nested), "
           f"extrapolated to {n_target} queries")
    if scalings == {"measured"}:
        return f"each subset timed against all {n_entities} entities (no scaling); {fit}"
    if scalings == {"context part + per-statement part x N/C"}:
        return (f"each subset timed against C = {c_text} sampled candidates per query (T_C) and again with 1 per "
                f"query (T_1); s = (T_C - T_1)/(|Q|(C-1)) per statement; context part = T_1 - |Q|s (fixed per "
                f"query, not scaled); time at N = {n_entities} entities = context part + (T_C - context part) x N/C; "
                f"{fit}")
    pool = f" of {candidates[0]} candidates" if len(candidates) == 1 else ""
    return (f"S = {c_text} statements{pool} sampled per query, each a whole-statement forward pass with no shared "
            f"per-query work, so time x N/S with N = {n_entities}; {fit}")


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "-"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _table_row(method: str, total: float, n_target: int, speed_up: float, basis: str, se: float = NAN, std: float = NAN) -> dict:
    return {"method": method, "time_per_query_s": total / n_target, "total_seconds": total, "total": _duration(total),
            "total_se_fit": se, "total_std_over_runs": std, "speed_up_vs_deer": speed_up, "basis": basis}


@dataclasses.dataclass(frozen=True)
class TimingPlan:
    """What ``run_compute_time`` times."""

    query_sizes: Sequence[int] = PAPER_QUERY_SIZES  # |Q| values of the BEAR fit, each timed ``repeats`` times
    candidates: int | None = None  # entities bear_ref ranks per query (None: all; else at least 2)
    repeats: int = 3
    plain_statements: int | None = 32  # statements per query of the plain scorer (None: all)
    deer_queries: int | None = None  # DEER's sample, queries and candidates (None: all)
    deer_candidates: int | None = None
    target: str = "all"  # 'all' (every triple) or a split name
    scorers: Sequence[str] = reference.TIMED_SCORERS  # the BEAR scorers timed
    seed: int = 0  # the samples'
    warmup: bool = True  # an untimed pass first


def run_compute_time(kg, loaded, templates, out_dir: Path, plan: TimingPlan | None = None, split: str = "test",
                     settings: dict | None = None, token_budget: int | None = None, log=print) -> dict:
    """Time DEER and the BEAR scorers as ``plan`` says; write compute_time.csv/.md (Table 1, each row with its
    basis), compute_time_fits.csv/.md, compute_time_fit.png and compute_time.json.  ``token_budget`` None: DEER's default."""
    from kg_data import build_queries

    plan = plan or TimingPlan()
    candidates, repeats, target, seed = plan.candidates, plan.repeats, plan.target, plan.seed

    output = ExperimentOutput(out_dir, "compute_time")
    all_queries = build_queries(kg, split)
    n_entities, n_target = kg.n_entities, target_query_count(kg, target)
    sizes = sorted(set(int(s) for s in plan.query_sizes if 0 < int(s) <= len(all_queries)))
    left_out = sorted(set(int(s) for s in plan.query_sizes) - set(sizes))
    if left_out:  # said, not dropped silently: the fit's sizes are not the ones asked for
        warn(f"query sizes {', '.join(map(str, left_out))} left out: the {split} split has {len(all_queries)} queries")
    cut = [f"{name} {asked} (there are {have})" for name, asked, have in (
        ("candidates", candidates, n_entities), ("deer_candidates", plan.deer_candidates, n_entities),
        ("deer_queries", plan.deer_queries, len(all_queries))) if asked is not None and asked > have]
    if cut:  # the settings record what was asked; each row's basis what was timed
        warn(f"{', '.join(cut)}: timed with all of them")
    if len(sizes) < 2:
        raise ValueError(f"need at least two query sizes between 1 and {len(all_queries)} ({split} queries)")
    if candidates is not None and candidates < 2:
        raise ValueError("--candidates must be at least 2: bear_ref's time is split using 1 and C statements per query")
    # The statements the BEAR scorers are timed on fit the model, as in every run: checked before any timing.
    guard_lengths(kg_benchmark_task(all_queries, templates), [get_probe("bear")], open_backend("hf", loaded), templates)
    warm = restrict_queries(all_queries, [0], min(8, n_entities), seed) if plan.warmup else None
    if plan.warmup:  # first forward passes pay for thread pools and allocations; at the timed budget (its batch shapes)
        deer_probe(warm, loaded, templates=templates, token_budget=token_budget, show_progress=False)

    deer_rows = np.arange(len(all_queries)) if plan.deer_queries is None else \
        np.random.default_rng(seed).choice(len(all_queries), size=min(plan.deer_queries, len(all_queries)), replace=False)
    log(f"timing DEER on {len(deer_rows)} queries x {plan.deer_candidates or n_entities} entities")
    deer = time_deer(all_queries, loaded, templates, deer_rows, plan.deer_candidates, n_target, seed, token_budget)
    budget_note = (f"DEER token budget {deer['token_budget']} padded tokens per batch"
                   + (" (the probe default)" if token_budget is None else ""))
    log(budget_note)
    table_rows = [_table_row("DEER", deer["total_seconds"], n_target, 1.0, deer["basis"])]
    scorer_results, fit_rows, curves = {}, [], []
    for scorer in plan.scorers:
        score, plain = reference.timing_scorer(scorer), scorer == "plain"
        log(f"timing {scorer} on |Q| = {', '.join(map(str, sizes))} x {repeats} runs")
        if plan.warmup:
            score(warm, loaded, templates, statements_per_query=2)
        timing = time_scorer(score, all_queries, loaded, templates, sizes, repeats, None if plain else candidates,
                             plan.plain_statements if plain else None, seed, split_context=scorer == "bear_ref")
        extrapolation = repeated_fit_extrapolation(sizes, timing["times_by_repeat"], n_target)
        points = np.tile(sizes, repeats)
        parts = {part: np.concatenate(timing[f"{part}_times_by_repeat"]) for part in ("context", "statement")}
        parts = {part: dataclasses.asdict(linear_fit(points, times)) if np.ptp(times) > 0 else None
                 for part, times in parts.items()}
        basis = extrapolation_method(timing, n_entities, n_target, repeats)
        scorer_results[scorer] = {**timing, "extrapolation": extrapolation, "part_fits": parts, "basis": basis}
        fit, total, per_run = extrapolation["pooled_fit"], extrapolation["prediction"], extrapolation["per_repeat_predictions"]
        if not (fit["slope"] > 0 and total > 0):  # time that falls as queries grow: noise, not a cost
            warn(f"{SCORER_LABELS[scorer]}: the fit of time on |Q| has slope {fit['slope']:.3g} s per query and extrapolates "
                 f"to {total:.3g} s: timing noise at these query sizes, not a cost; time larger --query-sizes")
        table_rows.append(_table_row(SCORER_LABELS[scorer], total, n_target, total / deer["total_seconds"], basis,
                                     extrapolation["prediction_se"], per_run["std"]))
        fit_rows.append({
            "scorer": scorer, "points": len(points), "slope_s_per_query": fit["slope"], "slope_se": fit["slope_se"],
            "context_s_per_query": parts["context"]["slope"] if parts["context"] else 0.0,
            "statements_s_per_query": parts["statement"]["slope"] if parts["statement"] else NAN,
            "intercept_s": fit["intercept"], "intercept_se": fit["intercept_se"], "r_squared": fit["r_squared"],
            "target_queries": n_target, "prediction_s": total, "prediction_se": extrapolation["prediction_se"],
            "per_run_mean_s": per_run["mean"], "per_run_std_s": per_run["std"],
        })
        curves.append({"scorer": SCORER_LABELS[scorer], "sizes": sizes, "times_by_repeat": timing["times_by_repeat"],
                       "slope": fit["slope"], "intercept": fit["intercept"]})

    output.table("compute_time", pd.DataFrame(table_rows), note=(
        f"Total = all {n_target} {'triples' if target == 'all' else target + ' queries'} x {n_entities} entities, "
        f"model {loaded.name} on {loaded.device} ({loaded.dtype}); {budget_note}. BEAR totals are extrapolated as each "
        f"basis says; total_se_fit = standard error of the fitted line at the target (independent subsets), "
        f"total_std_over_runs = spread of the per-run fits' extrapolations. "
        f"Paper: DEER 16 min, BEAR 330 days ({PAPER['setting']})."))
    if fit_rows:
        output.table("compute_time_fits", pd.DataFrame(fit_rows),
                     note="time (s, against all entities) = intercept + slope x |Q|, OLS over independent random "
                          "query subsets (points); se from the pooled fit's residuals; slope = context_s_per_query "
                          "(fixed per-query part, not scaled) + statements_s_per_query (per-statement part, scaled to "
                          "all entities); per_run_* = spread of the extrapolation over repeated runs.")
        output.figure("compute_time_fit", lambda: plots.compute_time_fits(curves))
    return output.finish({
        "experiment": "compute-time",
        "settings": {**(settings or {}), "split": split, "query_sizes": sizes, "candidates": candidates,
                     "repeats": repeats, "plain_statements": plan.plain_statements, "deer_queries": plan.deer_queries,
                     "deer_candidates": plan.deer_candidates, "target": target, "seed": seed,
                     "token_budget": token_budget},  # as asked (None: the probe's default); the one used: deer.token_budget
        "model": loaded.metadata(), "kg": kg.summary(), "target_queries": n_target, "entities": n_entities,
        "table": table_rows, "deer": deer, "scorers": scorer_results, "paper": PAPER,
    })
