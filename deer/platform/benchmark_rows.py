"""A cloze benchmark's rows: one per query, its fields, and per probe the gold's realistic rank, the argmax
prediction and whether it is the gold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types

import numpy as np
import pandas as pd

from deer.platform.rank_step import TaskRanking, rank_task
from kg_data.task import Task

RANK_RULE = "realistic rank 1 + #higher + #tied/2 among the query's candidates; prediction = argmax (first on a tie)"
RANK_COLUMNS = ("rank", "predicted", "correct", "predicted_index", "gold_score")  # each as {probe}_{column}


def rank_columns(probe: str) -> list[str]:
    """The columns ``ranks_from_scores`` gives ``probe``."""
    return [f"{probe}_{column}" for column in RANK_COLUMNS]


def task_digest(task: Task) -> str:
    """Identifies the queries and candidate sets of a task."""
    digest = hashlib.sha256()
    for q in task.queries:
        digest.update(json.dumps(dataclasses.astuple(q)).encode())
    for name in sorted(task.candidate_sets):
        candidates = task.candidate_sets[name]
        descriptions = None if candidates.descriptions is None else list(candidates.descriptions)
        digest.update(json.dumps([name, list(candidates.labels), descriptions]).encode())
    return digest.hexdigest()[:16]


def task_frame(task: Task) -> pd.DataFrame:
    """The task's columns of a cloze run's rows: each query's fields and its set's size."""
    frame = pd.DataFrame([dataclasses.asdict(q) for q in task.queries])
    frame["n_candidates"] = [len(task.candidate_set(q)) for q in task.queries]
    return frame


def ranking_rows(task: Task, ranking: TaskRanking, probe: str) -> pd.DataFrame:
    """Per query: rank of the gold, predicted label and index, correct, the gold's score (NaN, None or -1 where not
    ranked), by the one rank rule (``RANK_RULE``: the rank step's unfiltered realistic rank and first best)."""
    ranked = ranking.ranked
    best = np.where(ranked, ranking.top[:, 0] if ranking.top.shape[1] else -1, -1).astype(np.int64)
    gold = np.asarray([q.gold for q in task.queries], dtype=np.int64)
    # an invalid gold score ranks last and is never correct (the argmax of an all-invalid row is its first)
    correct = np.where(ranked, ((best == gold) & np.isfinite(ranking.gold_scores)).astype(np.float64), np.nan)
    predicted = [task.candidate_set(q).labels[best[i]] if ranked[i] else None for i, q in enumerate(task.queries)]
    columns = (np.where(ranked, ranking.ranks.raw, np.nan), predicted, correct, best, ranking.gold_scores)
    return pd.DataFrame(dict(zip(rank_columns(probe), columns, strict=True)))


def ranks_from_scores(task: Task, scores: dict[int, np.ndarray], probe: str, chunk_rows: int | None = None) -> pd.DataFrame:
    """``ranking_rows`` of {query index: scores over its set}, ``chunk_rows`` of a set ranked at a time (a row of
    another width than its set is refused)."""
    return ranking_rows(task, rank_task(task, types.SimpleNamespace(scores=scores), probe, chunk_rows=chunk_rows), probe)
