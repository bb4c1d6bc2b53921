"""A cloze benchmark's rows (``kg_data.cloze.ClozeTask``): one per query, its fields, and per probe
the gold answer's realistic rank, the argmax prediction and whether it is the gold.

Every benchmark path builds its rows here: the cloze runner (``bear_ref.cloze_runner``) for DEER,
LAMA and BEAR side by side, and the BEAR data-set score (``bear_ref.dataset``), which is BEAR's
columns of these rows with lm-pub-quiz's metrics on top.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pandas as pd

from deer.core.ranking import rank_and_best
from kg_data.cloze import ClozeTask

RANK_RULE = "realistic rank 1 + #higher + #tied/2 among the query's candidates; prediction = argmax (first on a tie)"


def task_digest(task: ClozeTask) -> str:
    """Identifies the queries and candidate sets (text, gold, scoring rule) of a task."""
    digest = hashlib.sha256()
    for q in task.queries:
        digest.update(json.dumps(dataclasses.astuple(q)).encode())
    for name in sorted(task.candidate_sets):
        digest.update(json.dumps([name, task.candidate_sets[name].labels, task.candidate_sets[name].descriptions]).encode())
    return digest.hexdigest()[:16]


def query_frame(task: ClozeTask) -> pd.DataFrame:
    frame = pd.DataFrame([dataclasses.asdict(q) for q in task.queries])
    frame["n_candidates"] = [len(task.candidate_set(q)) for q in task.queries]
    return frame


def ranks_from_scores(task: ClozeTask, scores: dict[int, np.ndarray], probe: str) -> pd.DataFrame:
    """Per query: rank of the gold, predicted label, correct (NaN/None where not scored).  The one
    rank rule (``deer.core.ranking``): a failed (non-finite) score never beats the gold."""
    n = len(task.queries)
    rank = np.full(n, np.nan)
    correct = np.full(n, np.nan)
    predicted = [None] * n
    predicted_index = np.full(n, -1, dtype=np.int64)
    gold_score = np.full(n, np.nan)
    for i, row in scores.items():
        q = task.queries[i]
        ranks, best_positions = rank_and_best(row, q.gold)
        rank[i], best = ranks[0], int(best_positions[0])
        predicted[i] = task.candidate_set(q).labels[best]
        predicted_index[i] = best
        correct[i] = float(best == q.gold)
        gold_score[i] = row[q.gold]
    return pd.DataFrame({f"{probe}_rank": rank, f"{probe}_predicted": predicted, f"{probe}_correct": correct,
                         f"{probe}_predicted_index": predicted_index, f"{probe}_gold_score": gold_score})
