"""The reference scorers as the compute-time experiment times them (probes themselves run through
``deer.runner.run_probe``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deer.backends import open_backend
from deer.backends.plain import plain_conditional_scores
from deer.base.work import WorkCounter

TIMED_SCORERS = ("bear_ref", "plain")


def timing_scorer(scorer: str) -> Callable[..., dict]:
    """``score(queries, loaded, templates, statements_per_query=None, seed=0) -> work dict``: scores every
    (query, candidate) statement of ``queries`` (or S sampled per query) with ``scorer`` ("bear_ref": the
    shared-prefix ``StatementScorer`` BEAR uses; "plain": one forward pass per whole statement, as
    lm-pub-quiz) and returns the work done (statements, tokens, forward seconds).  The caller times it.
    """
    if scorer not in TIMED_SCORERS:
        raise ValueError(f"unknown scorer '{scorer}'; choose from {', '.join(TIMED_SCORERS)}")
    if scorer == "bear_ref":

        def score_query(loaded, context, continuations, state):
            if "scorer" not in state:  # one scorer for the run (setdefault would open a backend per query, timed)
                state["scorer"] = open_backend("hf", loaded).statement_scorer()
            state["scorer"].score(context, continuations)
            return state["scorer"].work()
    else:

        def score_query(loaded, context, continuations, state):
            stats = state.setdefault("stats", WorkCounter())
            plain_conditional_scores(loaded.model, loaded.tokenizer, context, continuations, stats=stats)
            return stats.as_dict()

    def score(queries, loaded, templates, statements_per_query=None, seed: int = 0) -> dict:
        kg, rng = queries.kg, np.random.default_rng(seed)
        state: dict = {}
        work: dict = {}
        statements = 0
        for index in range(len(queries)):
            positions = np.arange(len(queries.candidates))
            if statements_per_query is not None and statements_per_query < len(positions):
                positions = np.sort(rng.choice(positions, size=statements_per_query, replace=False))
            context = templates.query_context(kg, tuple(queries.triples[index].tolist()))
            continuations = [templates.continuation(kg, int(queries.candidates[c])) for c in positions]
            work = score_query(loaded, context, continuations, state)
            statements += len(positions)
        return {**work, "statements": statements}

    return score
