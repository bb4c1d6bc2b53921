"""The plain rank rule, written for clarity: the oracle the rank kernel (deer.platform.ranking) is tested against."""

from __future__ import annotations

import numpy as np


def rank_of(scores_row: np.ndarray, gold: int, filter_positions: np.ndarray | None = None) -> float:
    """Realistic rank of ``gold`` in one row of scores.

    Competitors with a non-finite score are never ahead of the gold; a non-finite gold score
    is behind every competitor.
    """
    scores_row = np.asarray(scores_row, dtype=np.float64)
    keep = np.ones(len(scores_row), dtype=bool)
    if filter_positions is not None and len(filter_positions):
        keep[filter_positions] = False
    keep[gold] = False
    competitors = scores_row[keep]
    gold_score = scores_row[gold]
    if not np.isfinite(gold_score):
        return float(len(competitors) + 1)
    competitors = competitors[np.isfinite(competitors)]
    ahead, tied = np.sum(competitors > gold_score), np.sum(competitors == gold_score)
    return float(1 + ahead + tied / 2)


def plain_top_k(scores_row: np.ndarray, k: int, excluded: int = -1) -> list[int]:
    """The k best positions of one row, best first: invalid scores last, ties by position, ``excluded`` never."""
    cleaned = np.where(np.isfinite(scores_row), scores_row, -np.inf)
    order = [int(i) for i in np.argsort(-cleaned, kind="stable") if i != excluded]
    return order[:k]
