"""The one place experiments call the reference probes of ``bear_ref`` (BEAR, LAMA, plain BEAR).

Experiments never score statements themselves.  They go through two small functions:

* :func:`reference_runner` ``(probe)`` -> ``run(queries, loaded, templates, out_dir) -> metrics``,
  a probe run that adds ``{probe}_rank_raw`` / ``{probe}_rank_filtered`` to the ranks table in
  ``out_dir`` (the same table DEER writes), for ``probe`` in ``REFERENCE_PROBES``;
* :func:`timing_scorer` ``(scorer)`` -> ``score(queries, loaded, templates, ...)``, which does
  the scoring work of ``scorer`` ("bear_ref": ``bear_ref.statement_scorer.StatementScorer``, the
  shared-prefix scorer ``run_bear_probe`` uses;
  "plain": ``bear_ref.plain_scorer``, one forward pass per whole statement as lm-pub-quiz
  does) on the (query, candidate) statements, for timing;

and :func:`single_token_queries` restricts a query set to LAMA's single-token protocol.

If ``bear_ref`` changes its API, only this module changes.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

REFERENCE_PROBES = ("bear", "lama")
TIMED_SCORERS = ("bear_ref", "plain")

ProbeRunner = Callable[..., dict]
Scorer = Callable[..., object]


class ReferenceUnavailable(RuntimeError):
    """bear_ref (or the part of it an experiment needs) is not installed in this checkout."""


# Where bear_ref keeps each query-set runner: probe -> (module, function).
RUNNERS = {"bear": ("bear_ref.kg_probe", "run_bear_probe"), "lama": ("bear_ref.lama", "run_lama_probe")}


def _bear_ref_function(module_name: str, name: str) -> Callable:
    import importlib

    try:
        function = getattr(importlib.import_module(module_name), name, None)
    except ImportError as error:
        raise ReferenceUnavailable(f"{module_name} cannot be imported ({error})") from None
    if not callable(function):
        raise ReferenceUnavailable(f"{module_name} has no {name}")
    return function


def _metrics_of(probe: str, result) -> dict:
    """The probe's metrics from whatever a runner returns: metrics, (metrics, metadata), {probe: metrics}."""
    if isinstance(result, tuple):
        result = result[0]
    result = getattr(result, "metrics", result)
    if isinstance(result, dict) and probe in result and isinstance(result[probe], dict):
        return result[probe]
    return result


def reference_runner(probe: str) -> ProbeRunner:
    """``run(queries, loaded, templates, out_dir, show_progress=False, **options) -> metrics`` for BEAR or LAMA.

    The run adds ``{probe}_rank_*`` columns to the ranks table in ``out_dir``.  Options not
    accepted by the bear_ref function are dropped.  LAMA is run on every query (the log-prob
    of each candidate's first token), so its table rows match DEER's.
    """
    if probe not in REFERENCE_PROBES:
        raise ValueError(f"unknown reference probe '{probe}'; choose from {', '.join(REFERENCE_PROBES)}")
    function = _bear_ref_function(*RUNNERS[probe])
    accepted = inspect.signature(function).parameters

    def run(queries, loaded, templates, out_dir: Path, show_progress: bool = False, **options) -> dict:
        kwargs = {k: v for k, v in {"show_progress": show_progress, **options}.items() if k in accepted}
        return _metrics_of(probe, function(queries, loaded, templates, Path(out_dir), **kwargs))

    return run


def single_token_queries(queries, tokenizer):
    """LAMA's single-token protocol: only candidates whose name is one token under ``tokenizer``,
    and only the queries whose gold tail is one of them (filters rebuilt); bear_ref's rule."""
    restrict = _bear_ref_function("bear_ref.lama", "restrict_to_single_token")
    return restrict(queries, tokenizer)


def statement_texts(queries, templates, index: int, candidate_positions) -> tuple[str, list[str]]:
    """(query context, continuations " t_name)") of query ``index`` for the given candidates."""
    kg = queries.kg
    context = templates.query_context(kg, tuple(queries.triples[index].tolist()))
    return context, [templates.continuation(kg, int(queries.candidates[c])) for c in candidate_positions]


def timing_scorer(scorer: str) -> Scorer:
    """``score(queries, loaded, templates, statements_per_query=None, seed=0) -> work dict``.

    Scores every (query, candidate) statement of ``queries`` with ``scorer`` -- or, with
    ``statements_per_query=S``, S candidates sampled per query -- and returns the work done:
    statements, tokens and forward seconds.  The caller times the call.
    """
    if scorer not in TIMED_SCORERS:
        raise ValueError(f"unknown scorer '{scorer}'; choose from {', '.join(TIMED_SCORERS)}")
    try:
        if scorer == "bear_ref":
            from bear_ref.statement_scorer import StatementScorer

            def score_query(loaded, context, continuations, state):
                scorer_ = state.setdefault("scorer", StatementScorer(loaded.model, loaded.tokenizer))
                scorer_.score(context, continuations)
                return scorer_.work()
        else:
            from bear_ref.plain_scorer import PlainStats, plain_conditional_scores

            def score_query(loaded, context, continuations, state):
                stats = state.setdefault("stats", PlainStats())
                plain_conditional_scores(loaded.model, loaded.tokenizer, context, continuations, stats=stats)
                return stats.as_dict()
    except ImportError as error:
        raise ReferenceUnavailable(f"bear_ref cannot provide the '{scorer}' scorer: {error}") from None

    def score(queries, loaded, templates, statements_per_query=None, seed: int = 0) -> dict:
        import numpy as np

        rng = np.random.default_rng(seed)
        state: dict = {}
        work: dict = {}
        statements = 0
        for index in range(len(queries)):
            positions = np.arange(len(queries.candidates))
            if statements_per_query is not None and statements_per_query < len(positions):
                positions = np.sort(rng.choice(positions, size=statements_per_query, replace=False))
            context, continuations = statement_texts(queries, templates, index, positions)
            work = score_query(loaded, context, continuations, state)
            statements += len(positions)
        return {**work, "statements": statements}

    return score
