"""Rank metrics (Hit@k, MRR, MR) with standard errors, the random baseline and the chance-adjusted index."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

HIT_KS = (1, 3, 10, 100)


def rank_metrics(ranks: np.ndarray, ks: Sequence[int] = HIT_KS) -> dict:
    """Hit@k, MRR, MR of realistic ranks, with standard errors of the means."""
    ranks = np.asarray(ranks, dtype=np.float64)
    n = len(ranks)
    metrics: dict = {"n": int(n)}
    if n == 0:
        return metrics
    hits = {f"hit@{k}": (ranks <= k).astype(np.float64) for k in ks}
    for name, values in {**hits, "mrr": 1.0 / ranks}.items():
        metrics[name] = float(values.mean())
        metrics[f"{name}_se"] = float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    metrics["mr"] = float(ranks.mean())
    return metrics


def random_baseline(n_competitors: np.ndarray, ks: Sequence[int] = HIT_KS) -> dict:
    """Expected metrics when the gold tail's rank is uniform on 1..C for each query's C."""
    counts = np.asarray(n_competitors, dtype=np.float64)
    baseline: dict = {"n": int(len(counts))}
    if len(counts) == 0:
        return baseline
    for k in ks:
        baseline[f"hit@{k}"] = float(np.mean(np.minimum(k, counts) / counts))
    # E[1/rank] = H_C / C, with H_C the C-th harmonic number.
    harmonic_numbers = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, int(counts.max()) + 1))])
    harmonic = harmonic_numbers[counts.astype(np.int64)]
    baseline["mrr"] = float(np.mean(harmonic / counts))
    baseline["mr"] = float(np.mean((counts + 1) / 2))
    return baseline


def adjusted_index(metrics: dict, baseline: dict) -> dict:
    """PyKEEN's adjusted index of each metric (Hoyt et al. 2022): (value - expected) / (1 - expected),
    expected under random ranking (``random_baseline``).  0 = chance, 1 = perfect; for MR this is AMRI.
    None where chance is already perfect (Hit@k with k >= every query's candidate count)."""
    adjusted = {}
    for name, expected in baseline.items():
        if name != "n" and name in metrics:
            room = 1.0 - expected
            adjusted[name] = None if abs(room) < 1e-12 else (metrics[name] - expected) / room
    return adjusted


def grouped_metrics(ranks: np.ndarray, groups: Sequence[str], ks: Sequence[int] = HIT_KS) -> dict:
    """``rank_metrics`` per group label (e.g. per relation), sorted by label."""
    ranks = np.asarray(ranks, dtype=np.float64)
    labels = np.asarray(groups)
    return {str(label): rank_metrics(ranks[labels == label], ks) for label in sorted(set(labels.tolist()))}
