"""The one place experiments call the reference probes of ``bear_ref`` (BEAR, LAMA, plain BEAR).

Experiments never score statements themselves.  They go through two small functions:

* :func:`reference_runner` ``(probe)`` -> ``run(queries, loaded, templates, out_dir) -> metrics``,
  a probe run that adds ``{probe}_rank_raw`` / ``{probe}_rank_filtered`` to the ranks table in
  ``out_dir`` (the same table DEER writes), for ``probe`` in ``REFERENCE_PROBES``;
* :func:`timing_scorer` ``(scorer)`` -> ``score(queries, loaded, templates, ...)``, which does
  the scoring work of ``scorer`` ("bear_ref": ``bear_ref.clm_scorer.SharedPrefixScorer``;
  "plain": ``bear_ref.plain_scorer``, one forward pass per whole statement as lm-pub-quiz
  does) on the (query, candidate) statements, for timing.

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


def _bear_ref_function(module_name: str, *names: str) -> Callable:
    """The first of ``names`` defined in ``bear_ref.<module_name>`` (or in ``bear_ref``)."""
    import importlib

    modules = []
    for qualified in (f"bear_ref.{module_name}", "bear_ref"):
        try:
            modules.append(importlib.import_module(qualified))
        except ImportError as error:
            if qualified not in str(error) and "bear_ref" not in str(error):
                raise
    for module in modules:
        for name in names:
            function = getattr(module, name, None)
            if callable(function):
                return function
    raise ReferenceUnavailable(
        f"bear_ref provides none of {', '.join(names)} (looked in bear_ref.{module_name} and bear_ref); "
        "the reference probes are needed for this step -- or pass --run folders that already hold their ranks"
    )


def _call(function: Callable, queries, loaded, templates, **extra):
    """Call a bear_ref function, passing only the keyword arguments it accepts."""
    accepted = inspect.signature(function).parameters
    kwargs = {k: v for k, v in extra.items() if k in accepted or any(p.kind == p.VAR_KEYWORD for p in accepted.values())}
    return function(queries, loaded, templates, **kwargs)


def reference_runner(probe: str) -> ProbeRunner:
    """``run(queries, loaded, templates, out_dir, **options) -> metrics dict`` for BEAR or LAMA."""
    if probe not in REFERENCE_PROBES:
        raise ValueError(f"unknown reference probe '{probe}'; choose from {', '.join(REFERENCE_PROBES)}")
    function = _bear_ref_function("probe", f"run_{probe}_probe", f"run_{probe}")

    def run(queries, loaded, templates, out_dir: Path, show_progress: bool = False, **options) -> dict:
        result = _call(function, queries, loaded, templates, out_dir=Path(out_dir), show_progress=show_progress, **options)
        return getattr(result, "metrics", result)

    return run


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
            from bear_ref.clm_scorer import SharedPrefixScorer

            def score_query(loaded, context, continuations, state):
                state.setdefault("scorer", SharedPrefixScorer(loaded.model, loaded.tokenizer))
                state["scorer"].score_texts(context, continuations)
                return state["scorer"].stats.as_dict()
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
