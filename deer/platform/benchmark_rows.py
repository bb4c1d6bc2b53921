"""A cloze benchmark's rows: one per query, its fields, and per probe the gold's realistic rank, the argmax
prediction and whether it is the gold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict

import numpy as np
import pandas as pd

from deer.platform.ranking import rank_and_best
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
        digest.update(json.dumps([name, task.candidate_sets[name].labels, task.candidate_sets[name].descriptions]).encode())
    return digest.hexdigest()[:16]


def query_frame(task: Task) -> pd.DataFrame:
    frame = pd.DataFrame([dataclasses.asdict(q) for q in task.queries])
    frame["n_candidates"] = [len(task.candidate_set(q)) for q in task.queries]
    return frame


def ranks_from_scores(task: Task, scores: dict[int, np.ndarray], probe: str, chunk_rows: int = 1024) -> pd.DataFrame:
    """Per query: rank of the gold, predicted label, correct (NaN/None where not scored), by the one rank rule; a
    row of another width than its query's candidate set is refused (ValueError)."""
    n = len(task.queries)
    rank, correct, gold_score = (np.full(n, np.nan) for _ in range(3))
    predicted_index = np.full(n, -1, dtype=np.int64)
    by_width: dict[int, list[int]] = defaultdict(list)
    for i, row in scores.items():
        query = task.queries[i]
        if len(row) != len(task.candidate_set(query)):  # ranked so, the gold's rank would count the wrong candidates
            raise ValueError(f"probe {probe!r}, query {i} ({task.describe(query)}): {len(row)} scores for the "
                             f"{len(task.candidate_set(query))} candidates of its set {query.candidates!r}; a probe "
                             "scores each candidate once, in the set's order")
        by_width[len(row)].append(i)
    for members in by_width.values():
        for start in range(0, len(members), chunk_rows):
            rows = members[start:start + chunk_rows]
            gold = np.array([task.queries[i].gold for i in rows], dtype=np.int64)
            matrix = np.stack([scores[i] for i in rows])
            ranks, best = rank_and_best(matrix, gold)
            rank[rows], predicted_index[rows] = ranks, best
            gold_score[rows] = matrix[np.arange(len(rows)), gold]
            # an invalid gold score ranks last and is never correct (the argmax of an all-invalid row is its first)
            correct[rows] = ((best == gold) & np.isfinite(gold_score[rows])).astype(np.float64)
    predicted = [task.candidate_set(q).labels[predicted_index[i]] if i in scores else None for i, q in enumerate(task.queries)]
    return pd.DataFrame(dict(zip(rank_columns(probe), (rank, predicted, correct, predicted_index, gold_score), strict=True)))
