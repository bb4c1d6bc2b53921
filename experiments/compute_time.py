"""Compute time: DEER measured, BEAR measured on query subsets and extrapolated (paper Table 1).

DEER's work is one forward pass per entity and per query plus one similarity search, so it is
timed directly (``time.perf_counter``, stored unrounded): on all queries and entities, or on a
sample and scaled per entity, per query and per (query, entity) pair -- the output says which.

BEAR's work is one scored statement per (query, candidate).  As in the paper it is timed on
query subsets of increasing size |Q| and extrapolated to every query by an ordinary
least-squares fit time = a + b |Q|.  Every point of the fit is its own fresh random sample of
queries (subsets are not nested in one another, and every repeat draws new ones), so the
points are independent and the fit's standard errors mean what they say.

Against all entities where feasible (``candidates=None``).  Where the candidate set must be
reduced to C entities (this CPU), the two kinds of work are kept apart, because only one of
them grows with the candidates:

* bear_ref reads each query's context once (a fixed cost per query) and then every
  statement's own tokens (a cost per statement).  Each subset is timed twice on the same
  queries: against its C candidates (T_C) and against one sampled candidate per query (T_1).
  Seconds per statement s = (T_C - T_1) / (|Q| (C - 1)); context part = T_1 - |Q| s; the time
  against all N entities is context part + (T_C - context part) x N / C, i.e. only the
  per-statement part is scaled by the candidate ratio.
* the plain scorer (lm-pub-quiz's way) has no shared per-query work -- every statement is one
  forward pass of its whole text -- so its time is scaled by N / S for the S statements
  sampled per query.

Paper (DEER): DEER 16 min for all 93,003 WN18RR triples x 40,943 entities with GPT-2 small on
an RTX 3090; BEAR (lm-pub-quiz) extrapolated to 330 days by a linear fit over |Q| = 16..151.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from deer.api import probe as deer_probe
from experiments import plots, reference
from experiments.report import ExperimentOutput
from experiments.runs import restrict_queries
from experiments.stats import linear_fit, repeated_fit_extrapolation

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
              token_budget: int | None = None) -> dict:
    """Run DEER (no embedding cache) on ``rows`` x ``n_candidates``; scale to the full KG.  ``token_budget``:
    the probe's own default (None: ``deer.backends.batching.auto_batch_limits``) unless given; the
    budget the encoder used is recorded.

    Full-size estimate = entities_seconds/entity x all entities + queries_seconds/query x target
    queries + ranking_seconds/(query x entity) x target queries x all entities.
    """
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


def _sample_seed(seed: int, repeat: int, size_index: int) -> int:
    """One seed per fit point, so every (repeat, size) draws its own queries and candidates."""
    return int(np.random.default_rng([seed, repeat, size_index]).integers(2**31 - 1))


def _timed(score: Callable, queries, loaded, templates, statements_per_query: int | None, seed: int) -> tuple[float, dict]:
    started = time.perf_counter()
    done = score(queries, loaded, templates, statements_per_query=statements_per_query, seed=seed)
    return time.perf_counter() - started, {k: v for k, v in (done or {}).items() if isinstance(v, (int, float))}


def time_scorer(score: Callable, all_queries, loaded, templates, sizes: Sequence[int], repeats: int,
                n_candidates: int | None, statements_per_query: int | None, seed: int,
                split_context: bool = True) -> dict:
    """Seconds of ``score`` on independent query subsets, expressed against all entities.

    For each of ``repeats`` runs and each size in ``sizes``, a fresh sample of that many queries
    (never a prefix of another sample) is ranked against ``n_candidates`` entities (None: all;
    gold tails kept), ``statements_per_query`` of them scored per query (None: every one).

    Times are in seconds and brought to all N entities per query as follows (``scaling`` per
    point): 'measured' when every entity was scored; with ``split_context`` (a scorer with a
    shared per-query context pass, bear_ref) the subset is timed a second time with one
    statement per query (T_1) and only the per-statement part is scaled, N / C; otherwise
    (plain: no shared work) the whole time is scaled by N / C.

    Returns sizes, times_by_repeat (against all entities; repeats x sizes), raw_times_by_repeat
    (as measured), context_times_by_repeat and statement_times_by_repeat (the two parts of
    times_by_repeat), and one work record per point.
    """
    n_entities = all_queries.kg.n_entities
    keys = ("raw_times_by_repeat", "times_by_repeat", "context_times_by_repeat", "statement_times_by_repeat")
    series: dict = {key: [] for key in keys}
    work = []
    for repeat in range(repeats):
        rows_of_repeat = {key: [] for key in keys}
        for size_index, size in enumerate(sizes):
            sample_seed = _sample_seed(seed, repeat, size_index)
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
            record.update({"scaling": scaling, "seconds_all_entities": context + statements,
                           "query_rows": rows.tolist()})
            work.append(record)
            for key, value in zip(keys, (seconds, context + statements, context, statements), strict=True):
                rows_of_repeat[key].append(value)
        for key in keys:
            series[key].append(rows_of_repeat[key])
    return {"sizes": list(sizes), **series, "work": work}


def extrapolation_method(scorer: str, timing: dict, n_entities: int, n_target: int, repeats: int) -> str:
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


def run_compute_time(
    kg, loaded, templates, out_dir: Path,
    split: str = "test",
    query_sizes: Sequence[int] = PAPER_QUERY_SIZES,
    candidates: int | None = None,
    repeats: int = 3,
    plain_statements: int | None = 32,
    deer_queries: int | None = None,
    deer_candidates: int | None = None,
    target: str = "all",
    scorers: Sequence[str] = reference.TIMED_SCORERS,
    seed: int = 0,
    warmup: bool = True,
    settings: dict | None = None,
    token_budget: int | None = None,
    log=print,
) -> dict:
    """Time DEER and the BEAR scorers on ``kg`` with ``loaded``; write Table 1, fits and plot.

    ``query_sizes``: |Q| values for the BEAR fit, each timed ``repeats`` times on fresh query
    samples; ``candidates``: entities bear_ref ranks per query (None: all; otherwise at least 2,
    and only its per-statement time is scaled to all entities); ``plain_statements``: statements
    per query timed for the plain scorer (None: all entities); ``deer_queries``/
    ``deer_candidates``: DEER's sample (None: all queries of ``split`` / all entities);
    ``target``: 'all' (every triple) or a split name; ``token_budget``: DEER's padded tokens per batch
    (None: the probe's own default, ``deer.backends.batching.auto_batch_limits``; the budget used is
    recorded as ``deer.token_budget``).  Writes compute_time.csv/.md (Table 1,
    with each row's basis: exactly how it was extrapolated), compute_time_fits.csv/.md,
    compute_time_fit.png and compute_time.json.
    """
    from kg_data import build_queries

    output = ExperimentOutput(out_dir, "compute_time")
    all_queries = build_queries(kg, split)
    n_entities, n_target = kg.n_entities, target_query_count(kg, target)
    sizes = sorted(set(int(s) for s in query_sizes if 0 < int(s) <= len(all_queries)))
    if len(sizes) < 2:
        raise ValueError(f"need at least two query sizes between 1 and {len(all_queries)} ({split} queries)")
    if candidates is not None and candidates < 2:
        raise ValueError("--candidates must be at least 2: bear_ref's time is split using 1 and C statements per query")
    if warmup:  # first forward passes pay for thread pools and allocations
        restrict_for_warmup = restrict_queries(all_queries, [0], min(8, n_entities), seed)
        # at the timed budget: the warm-up allocates for the batch shapes the timed run uses
        deer_probe(restrict_for_warmup, loaded, templates=templates, token_budget=token_budget, show_progress=False)

    deer_rows = np.arange(len(all_queries)) if deer_queries is None else \
        np.random.default_rng(seed).choice(len(all_queries), size=min(deer_queries, len(all_queries)), replace=False)
    log(f"timing DEER on {len(deer_rows)} queries x {deer_candidates or n_entities} entities")
    deer = time_deer(all_queries, loaded, templates, deer_rows, deer_candidates, n_target, seed, token_budget)
    log(f"DEER token budget {deer['token_budget']} padded tokens per batch"
        f"{' (the probe default)' if token_budget is None else ''}")
    table_rows = [{
        "method": "DEER", "time_per_query_s": deer["total_seconds"] / n_target, "total_seconds": deer["total_seconds"],
        "total": _duration(deer["total_seconds"]), "total_se_fit": float("nan"), "total_std_over_runs": float("nan"),
        "speed_up_vs_deer": 1.0, "basis": deer["basis"],
    }]
    scorer_results, fit_rows, curves = {}, [], []
    for scorer in scorers:
        score = reference.timing_scorer(scorer)
        per_query = plain_statements if scorer == "plain" else None
        scorer_candidates = None if scorer == "plain" else candidates
        log(f"timing {scorer} on |Q| = {', '.join(map(str, sizes))} x {repeats} runs")
        if warmup:
            score(restrict_queries(all_queries, [0], min(8, n_entities), seed), loaded, templates, statements_per_query=2)
        timing = time_scorer(score, all_queries, loaded, templates, sizes, repeats, scorer_candidates, per_query, seed,
                             split_context=scorer == "bear_ref")
        extrapolation = repeated_fit_extrapolation(sizes, timing["times_by_repeat"], n_target)
        points = np.tile(sizes, repeats)
        parts = {part: linear_fit(points, np.concatenate(timing[f"{part}_times_by_repeat"])).as_dict()
                 if np.ptp(np.concatenate(timing[f"{part}_times_by_repeat"])) > 0 else None
                 for part in ("context", "statement")}
        basis = extrapolation_method(scorer, timing, n_entities, n_target, repeats)
        scorer_results[scorer] = {**timing, "extrapolation": extrapolation, "part_fits": parts, "basis": basis}
        fit = extrapolation["pooled_fit"]
        total = extrapolation["prediction"]
        table_rows.append({
            "method": SCORER_LABELS[scorer], "time_per_query_s": total / n_target, "total_seconds": total,
            "total": _duration(total), "total_se_fit": extrapolation["prediction_se"],
            "total_std_over_runs": extrapolation["per_repeat_predictions"]["std"],
            "speed_up_vs_deer": total / deer["total_seconds"], "basis": basis,
        })
        fit_rows.append({
            "scorer": scorer, "points": len(points), "slope_s_per_query": fit["slope"], "slope_se": fit["slope_se"],
            "context_s_per_query": parts["context"]["slope"] if parts["context"] else 0.0,
            "statements_s_per_query": parts["statement"]["slope"] if parts["statement"] else float("nan"),
            "intercept_s": fit["intercept"], "intercept_se": fit["intercept_se"], "r_squared": fit["r_squared"],
            "target_queries": n_target, "prediction_s": total, "prediction_se": extrapolation["prediction_se"],
            "per_run_mean_s": extrapolation["per_repeat_predictions"]["mean"],
            "per_run_std_s": extrapolation["per_repeat_predictions"]["std"],
        })
        curves.append({"scorer": SCORER_LABELS[scorer], "sizes": sizes, "times_by_repeat": timing["times_by_repeat"],
                       "slope": fit["slope"], "intercept": fit["intercept"]})

    table_note = (
        f"Total = all {n_target} {'triples' if target == 'all' else target + ' queries'} x {n_entities} entities, "
        f"model {loaded.name} on {loaded.device} ({loaded.dtype}); DEER token budget {deer['token_budget']} padded tokens "
        f"per batch{' (the probe default)' if token_budget is None else ''}. BEAR totals are extrapolated as each basis says; "
        f"total_se_fit = standard error of the fitted line at the target (independent subsets), "
        f"total_std_over_runs = spread of the per-run fits' extrapolations. "
        f"Paper: DEER 16 min, BEAR 330 days ({PAPER['setting']})."
    )
    output.table("compute_time", pd.DataFrame(table_rows), note=table_note)
    if fit_rows:
        output.table("compute_time_fits", pd.DataFrame(fit_rows),
                     note="time (s, against all entities) = intercept + slope x |Q|, OLS over independent random "
                          "query subsets (points); se from the pooled fit's residuals; slope = context_s_per_query "
                          "(fixed per-query part, not scaled) + statements_s_per_query (per-statement part, scaled to "
                          "all entities); per_run_* = spread of the extrapolation over repeated runs.")
        output.figure("compute_time_fit", lambda: plots.compute_time_fits(curves))
    result = {
        "experiment": "compute-time",
        "settings": {**(settings or {}), "split": split, "query_sizes": sizes, "candidates": candidates,
                     "repeats": repeats, "plain_statements": plain_statements, "deer_queries": deer_queries,
                     "deer_candidates": deer_candidates, "target": target, "seed": seed,
                     # as asked (None: the probe's default); the budget used is deer.token_budget
                     "token_budget": token_budget},
        "model": loaded.metadata(),
        "kg": kg.summary(),
        "target_queries": n_target,
        "entities": n_entities,
        "table": table_rows,
        "deer": deer,
        "scorers": scorer_results,
        "paper": PAPER,
    }
    return output.finish(result)
