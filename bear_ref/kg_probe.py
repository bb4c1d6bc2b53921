"""BEAR: score every candidate statement of every query by its summed log-likelihood (PLL for masked LMs).

On a KG the statement for (h, r, ?) and t is the DEER query text closed with ``t_name)``, scored whole (a token
straddling the query's end would make a conditional score rank differently).  Work is quadratic, so with a
store root score rows are stored per chunk of queries: a run resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import deer
from bear_ref.cloze_scoring import count_statements, statement_scores
from deer.backends.models import LoadedModel
from deer.backends.pll import PLL_VARIANTS
from deer.backends.statement_scorer import StatementScorer
from deer.platform.length_guard import kg_statement_checks, set_statement_checks
from deer.platform.run_spec import model_identity
from deer.platform.stores import READ_ATTEMPTS, EmbeddingStore, PendingParts, StoreDamaged
from deer.platform.templates import PromptTemplates
from deer.probes import OptionValues, ProbeRequest, ProbeScores
from kg_data.cloze import LARGE_SET
from kg_data.queries import QuerySet

SCORER_VERSION = "bear-kg-v2"  # v2: whole-statement scores (v1: conditional after the query)


def score_store(loaded: LoadedModel, queries: QuerySet, templates: PromptTemplates, method: str, root: Path,
                backend_key: dict | None = None) -> EmbeddingStore:
    """Store of score rows (float32 per candidate, -inf allowed) keyed by everything that determines them;
    ``backend_key``: what a backend's scores depend on beyond the model (its ``store_key``)."""
    candidates = hashlib.sha256(np.ascontiguousarray(queries.candidates, dtype=np.int64).tobytes()).hexdigest()[:16]
    key = {"scorer": SCORER_VERSION, "toolkit": deer.__version__, "method": method, **model_identity(loaded),
           "kg_fingerprint": queries.kg.fingerprint(),
           "templates": templates.to_metadata(), "candidates": candidates, **(backend_key or {})}
    return EmbeddingStore(Path(root) / "scores", "bear", key, width=len(queries.candidates), minus_inf=True)


def bear_kg_scores(queries: QuerySet, scorer: StatementScorer, templates: PromptTemplates,
                   store: EmbeddingStore | None = None, chunk_size: int = 8,
                   show_progress: bool = True) -> tuple[np.ndarray, int]:
    """Scores (n_queries, n_candidates) float32 and the number of queries scored now.  With a store, rows are
    written in chunks (also on Ctrl-C) under its lock; stored rows that fail their checks are scored again."""
    kg, ids = queries.kg, queries.item_ids()
    continuations = [templates.continuation(kg, t) for t in queries.candidates]
    scores = np.zeros((len(queries), len(queries.candidates)), dtype=np.float32)

    def score_missing() -> int:
        with contextlib.ExitStack() as stack:
            pending = None
            if store is not None and store.missing(ids):
                stack.enter_context(store.locked())
                pending = stack.enter_context(PendingParts(store, count=chunk_size))
            missing = store.missing(ids) if store is not None else list(range(len(queries)))
            bar = stack.enter_context(tqdm(total=len(missing) * len(continuations), desc="BEAR statements", unit="stmt",
                                           disable=not show_progress))
            for q in missing:
                context = templates.query_context(kg, tuple(queries.triples[q].tolist()))
                scores[q] = scorer.score(context, continuations)
                bar.update(len(continuations))
                if pending is not None:
                    pending.add([ids[q]], scores[q : q + 1])
        return len(missing)

    scored = score_missing()
    if store is None:
        return scores, scored
    for attempt in range(READ_ATTEMPTS + 1):
        done = sorted(set(range(len(queries))) - set(store.missing(ids)))
        try:
            if done:
                scores[done] = store.get([ids[i] for i in done])
            return scores, scored
        except StoreDamaged:  # set aside by the store, with a warning naming it: its rows are missing again
            if attempt == READ_ATTEMPTS:
                raise
            scored += score_missing()


class BearProbe:
    """BEAR: every (query, candidate) statement's summed log-likelihood; ``pll_variant``: masked LMs' PLL."""

    name = "bear"
    summary = "summed log-likelihood of every candidate statement (quadratic; the reference)"
    options = {"pll_variant": "within_word_l2r"}
    option_values = {"pll_variant": OptionValues(str, PLL_VARIANTS)}

    def length_checks(self, task, templates, backend):
        """Every statement BEAR scores (a benchmark's never over ``LARGE_SET``)."""
        if task.kg_queries is not None:
            return kg_statement_checks(task.kg_queries, templates, backend)
        return set_statement_checks(task, [i for i, q in enumerate(task.queries) if q.candidates != LARGE_SET], backend)

    def score(self, request: ProbeRequest) -> ProbeScores:
        """A KG's statement scores, stored by chunk where there is a store; a benchmark's over each query's set."""
        return self._score_sets(request) if request.task.kg_queries is None else self._score_kg(request)

    def _score_kg(self, request: ProbeRequest) -> ProbeScores:
        queries, loaded, templates = request.task.kg_queries, request.loaded, request.templates
        started = time.perf_counter()
        scorer = request.backend.statement_scorer(request.options["pll_variant"])
        store = None if request.store_root is None else score_store(loaded, queries, templates, scorer.method, request.store_root,
                                                                    request.backend.store_key)
        scores, scored_now = bear_kg_scores(queries, scorer, templates, store, show_progress=request.show_progress)
        elapsed = time.perf_counter() - started
        statements = scored_now * len(queries.candidates)
        metadata = {
            "scoring": scorer.method,
            "statement": "query text + ' t_name)'; score = summed log-likelihood of the whole statement (every token after the first)",
            "cache": {"queries_scored_now": scored_now, "queries_from_cache": len(queries) - scored_now,
                      "store": str(store.folder) if store is not None else None,
                      "store_not_written": store.unwritable if store is not None else None},  # why, where a write to it failed
            "work": {**scorer.work(), "statements_scored_now": statements,
                     "statements_per_second": statements / elapsed if elapsed and statements else None},
            "timings": {"seconds": round(elapsed, 3)},
        }
        return ProbeScores(scores=scores, metadata=metadata)

    def _score_sets(self, request: ProbeRequest) -> ProbeScores:
        task = request.task
        scorer = request.backend.statement_scorer(request.options["pll_variant"])
        rows = [i for i, q in enumerate(task.queries) if q.candidates != LARGE_SET]
        statements = count_statements(task, rows)
        with tqdm(total=statements, desc="BEAR statements", unit="stmt", disable=not request.show_progress) as bar:
            scores = statement_scores(scorer, task, rows, bar.update)
        return ProbeScores(scores=scores, metadata={"scoring": scorer.statements_method, "statements": statements, "work": scorer.work()})
