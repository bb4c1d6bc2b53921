"""BEAR: score every candidate statement of every query by its summed log-likelihood (PLL for masked LMs).

A statement is the query's text with the answer in its slot (on a KG the DEER query text closed with ``t_name)``),
scored whole (a token straddling the query's end would make a conditional score rank differently).  Work is
quadratic, so over a streamed set (a KG's) score rows are stored per chunk of queries with a store root: a run resumes.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import deer
from bear_ref.cloze_scoring import answer_slot, count_statements, statement_scores
from deer.backends.models import LoadedModel
from deer.backends.pll import PLL_VARIANTS
from deer.backends.statement_scorer import StatementScorer
from deer.platform.run_spec import model_identity
from deer.platform.stores import READ_ATTEMPTS, EmbeddingStore, PendingParts, StoreDamaged
from deer.platform.task_texts import texts_of
from deer.probes import OptionValues, ProbeRequest, ProbeScores
from kg_data.cloze import LARGE_SET
from kg_data.task import Task

SCORER_VERSION = "bear-kg-v2"  # v2: whole-statement scores (v1: conditional after the query)


def score_store(loaded: LoadedModel, texts, n_candidates: int, method: str, root: Path,
                backend_key: dict | None = None) -> EmbeddingStore:
    """Store of a streamed set's score rows (float32 per candidate, -inf allowed) keyed by everything that determines
    them: the model, the task's texts (``texts.identity()``: a KG's fingerprint, templates and candidates) and the
    method; ``backend_key``: what a backend's scores depend on beyond the model (its ``store_key``)."""
    key = {"scorer": SCORER_VERSION, "toolkit": deer.__version__, "method": method, **model_identity(loaded),
           **texts.identity(), **(backend_key or {})}
    return EmbeddingStore(Path(root) / "scores", "bear", key, width=n_candidates, minus_inf=True)


def streamed_scores(task: Task, name: str, rows: list[int], scorer: StatementScorer, store: EmbeddingStore | None = None,
                    chunk_size: int = 8, show_progress: bool = True) -> tuple[dict[int, np.ndarray], int]:
    """({query: float32 scores over set ``name``}, queries scored now) of ``rows``, queries over that streamed set: each
    query's context read once for every candidate's continuation.  With a store, rows are written in chunks (also on
    Ctrl-C) under its lock; stored rows that fail their checks are scored again."""
    candidates = task.candidate_sets[name]
    row_ids = texts_of(task).row_ids() if store is not None else []
    ids = [row_ids[i] for i in rows] if store is not None else []
    scores = np.zeros((len(rows), len(candidates)), dtype=np.float32)
    continuations: dict = {}  # per (gap, what follows the slot): a KG's queries share one list

    def score_missing() -> int:
        with contextlib.ExitStack() as stack:
            pending = None
            if store is not None and store.missing(ids):
                stack.enter_context(store.locked())
                pending = stack.enter_context(PendingParts(store, count=chunk_size))
            missing = store.missing(ids) if store is not None else list(range(len(rows)))
            bar = stack.enter_context(tqdm(total=len(missing) * scores.shape[1], desc="BEAR statements", unit="stmt",
                                           disable=not show_progress))
            for k in missing:
                context, gap, after = answer_slot(task.queries[rows[k]])
                if (gap, after) not in continuations:
                    continuations[gap, after] = [gap + label + after for label in candidates.labels]
                scores[k] = scorer.score(context, continuations[gap, after])
                bar.update(scores.shape[1])
                if pending is not None:
                    pending.add([ids[k]], scores[k : k + 1])
        return len(missing)

    scored = score_missing()
    for attempt in range(READ_ATTEMPTS + 1 if store is not None else 0):
        done = sorted(set(range(len(rows))) - set(store.missing(ids)))
        try:
            if done:
                scores[done] = store.get([ids[k] for k in done])
            break
        except StoreDamaged:  # set aside by the store, with a warning naming it: its rows are missing again
            if attempt == READ_ATTEMPTS:
                raise
            scored += score_missing()
    return dict(zip(rows, scores, strict=True)), scored


class BearProbe:
    """BEAR: every (query, candidate) statement's summed log-likelihood; ``pll_variant``: masked LMs' PLL."""

    name = "bear"
    summary = "summed log-likelihood of every candidate statement (quadratic; the reference)"
    options = {"pll_variant": "within_word_l2r"}
    option_values = {"pll_variant": OptionValues(str, PLL_VARIANTS)}

    def length_checks(self, task, templates, backend):
        """Every statement BEAR scores (never over ``LARGE_SET``)."""
        return texts_of(task).statement_checks(sorted(i for rows in bear_sets(task).values() for i in rows), backend)

    def score(self, request: ProbeRequest) -> ProbeScores:
        """Each query's statements over its set: a streamed set's (a KG's) query by query, the context read once and
        the rows stored by chunk where there is a store; the others' a group of statements at a time (a prefix trie)."""
        task, backend = request.task, request.backend
        started = time.perf_counter()
        scorer = backend.statement_scorer(request.options["pll_variant"])
        sets = bear_sets(task)
        streamed = {name: rows for name, rows in sets.items() if task.candidate_sets[name].streamed}
        grouped = sorted(i for name, rows in sets.items() if name not in streamed for i in rows)
        scores, scored_now, streamed_statements, store = {}, 0, 0, None
        for name, rows in streamed.items():  # a KG's one set
            if request.store_root is not None:
                store = score_store(request.loaded, texts_of(task), len(task.candidate_sets[name]), scorer.method,
                                    request.store_root, backend.store_key)
            rows_scores, now = streamed_scores(task, name, rows, scorer, store, show_progress=request.show_progress)
            scores.update(rows_scores)
            scored_now += now
            streamed_statements += now * len(task.candidate_sets[name])
        statements = count_statements(task, grouped)
        with tqdm(total=statements, desc="BEAR statements", unit="stmt", disable=not request.show_progress or not grouped) as bar:
            scores.update(statement_scores(scorer, task, grouped, bar.update))
        statements += streamed_statements
        elapsed = time.perf_counter() - started
        metadata = {
            "scoring": scorer.method if streamed else scorer.statements_method,
            "statement": "the query's text with the answer in its slot (a KG's: query text + ' t_name)'); "
                         "score = summed log-likelihood of the whole statement (every token after the first)",
            "statements": statements,
            "work": {**scorer.work(), "statements_scored_now": statements,
                     "statements_per_second": statements / elapsed if elapsed and statements else None},
            "timings": {"seconds": round(elapsed, 3)},
        }
        if streamed:
            metadata["cache"] = {"queries_scored_now": scored_now,
                                 "queries_from_cache": sum(map(len, streamed.values())) - scored_now,
                                 "store": str(store.folder) if store is not None else None,
                                 "store_not_written": store.unwritable if store is not None else None}  # why a write failed
        return ProbeScores(scores=scores, metadata=metadata)


def bear_sets(task: Task) -> dict[str, list[int]]:
    """The queries BEAR scores, by candidate set: every one but those over ``LARGE_SET`` (LAMA's common vocabulary)."""
    return {name: rows for name, rows in task.rows_by_set().items() if name != LARGE_SET}
