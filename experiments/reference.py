"""The reference scorers' pieces the experiments time and restrict (probes themselves run through
``deer.runner.run_probe``, by their registered names):

* :func:`timing_scorer` ``(scorer)`` -> ``score(queries, loaded, templates, ...)``, which does
  the scoring work of ``scorer`` ("bear_ref": ``deer.backends.statement_scorer.StatementScorer``, the
  shared-prefix scorer BEAR uses; "plain": ``deer.backends.plain``, one forward pass per whole
  statement as lm-pub-quiz does) on the (query, candidate) statements, for timing;
* :func:`single_token_queries` restricts a query set to LAMA's single-token protocol.
"""

from __future__ import annotations

from collections.abc import Callable

from bear_ref.lama_probe import restrict_to_single_token
from deer.backends.plain import plain_conditional_scores
from deer.backends.statement_scorer import StatementScorer
from deer.platform.work import WorkCounter

TIMED_SCORERS = ("bear_ref", "plain")

Scorer = Callable[..., dict]


def single_token_queries(queries, tokenizer):
    """LAMA's single-token protocol: only candidates whose name is one token under ``tokenizer``,
    and only the queries whose gold tail is one of them (filters rebuilt); bear_ref's rule."""
    return restrict_to_single_token(queries, tokenizer)


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
    if scorer == "bear_ref":

        def score_query(loaded, context, continuations, state):
            scorer_ = state.setdefault("scorer", StatementScorer(loaded.model, loaded.tokenizer))
            scorer_.score(context, continuations)
            return scorer_.work()
    else:

        def score_query(loaded, context, continuations, state):
            stats = state.setdefault("stats", WorkCounter())
            plain_conditional_scores(loaded.model, loaded.tokenizer, context, continuations, stats=stats)
            return stats.as_dict()

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
