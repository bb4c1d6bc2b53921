"""Rank metrics (Hit@k, MRR, MR) with standard errors, the random baseline and the chance-adjusted index, of a KG's
ranks (``rank_metrics``) and of a cloze run's table (``cloze_metrics``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

HIT_KS = (1, 3, 10, 100)


def rank_metrics(ranks: np.ndarray, ks: Sequence[int] = HIT_KS) -> dict:
    """Hit@k, MRR, MR of realistic ranks, with standard errors of the means."""
    ranks = np.asarray(ranks, dtype=np.float64)
    n = len(ranks)
    metrics: dict = {"n": int(n)}
    if n == 0:
        return metrics
    for name, values in {**{f"hit@{k}": (ranks <= k).astype(np.float64) for k in ks}, "mrr": 1.0 / ranks}.items():
        metrics[name] = float(values.mean())
        metrics[f"{name}_se"] = float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    metrics["mr"] = float(ranks.mean())
    return metrics


def random_baseline(n_competitors: np.ndarray, ks: Sequence[int] = HIT_KS) -> dict:
    """Expected metrics when the gold tail's rank is uniform on 1..C for each query's C."""
    counts = np.asarray(n_competitors, dtype=np.float64)
    if len(counts) == 0:
        return {"n": 0}
    # E[1/rank] = H_C / C, with H_C the C-th harmonic number.
    harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, int(counts.max()) + 1))])[counts.astype(np.int64)]
    return {"n": len(counts), **{f"hit@{k}": float(np.mean(np.minimum(k, counts) / counts)) for k in ks},
            "mrr": float(np.mean(harmonic / counts)), "mr": float(np.mean((counts + 1) / 2))}


def adjusted_index(metrics: dict, baseline: dict) -> dict:
    """PyKEEN's adjusted index of each metric (Hoyt et al. 2022): (value - expected) / (1 - expected), 0 = chance,
    1 = perfect (for MR: AMRI); None where chance is already perfect (Hit@k with k >= every candidate count)."""
    return {name: None if abs(1.0 - expected) < 1e-12 else (metrics[name] - expected) / (1.0 - expected)
            for name, expected in baseline.items() if name != "n" and name in metrics}


def grouped_metrics(ranks: np.ndarray, groups: Sequence[str], ks: Sequence[int] = HIT_KS) -> dict:
    """``rank_metrics`` per group label (e.g. per relation), sorted by label."""
    ranks = np.asarray(ranks, dtype=np.float64)
    labels = np.asarray(groups)
    return {str(label): rank_metrics(ranks[labels == label], ks) for label in sorted(set(labels.tolist()))}


def observed_rank_metrics(raw: np.ndarray, filtered: np.ndarray, relations: Sequence[str] | None = None) -> dict:
    """A KG probe's metrics that its gold ranks alone determine (what a run computes and a read-back checks)."""
    observed: dict = {"raw": rank_metrics(raw), "filtered": rank_metrics(filtered)}
    if relations is not None:
        raw_blocks, filtered_blocks = grouped_metrics(raw, relations), grouped_metrics(filtered, relations)
        observed["per_relation"] = {name: {"raw": block, "filtered": filtered_blocks[name]} for name, block in raw_blocks.items()}
    return observed


CLOZE_KS = (1, 10)


def cloze_block(ranks, n_candidates, correct) -> dict:
    """P@1 (the argmax is the gold: first on a tie, as lm-pub-quiz and LAMA count), P@10, MRR and MR of the queries
    scored (a finite rank), with the ``random`` baseline and the ``adjusted`` index."""
    ranks = np.asarray(ranks, dtype=float)
    scored = np.isfinite(ranks)
    if not scored.any():
        return {"n": 0}
    observed = rank_metrics(ranks[scored], CLOZE_KS)
    observed["hit@1"] = float(np.asarray(correct, dtype=float)[scored].mean())
    baseline = random_baseline(np.asarray(n_candidates)[scored], CLOZE_KS)
    names = {"hit@1": "p@1", "hit@10": "p@10", "mrr": "mrr", "mr": "mr"}
    return {"n": observed["n"], **{new: observed[old] for old, new in names.items()}, "random_p@1": baseline["hit@1"],
            "random": {names[k]: v for k, v in baseline.items() if k in names},
            "adjusted": {names[k]: v for k, v in adjusted_index(observed, baseline).items()}}


def candidate_kind(candidates: pd.Series) -> pd.Series:
    """LAMA's common vocabulary, or "relation" (the relation's objects; a BEAR relation's answers)."""
    return candidates.where(candidates == "common-vocab", "relation")


def probes_in(table: pd.DataFrame, suffix: str = "_rank") -> list[str]:
    """The probes with a ``{probe}{suffix}`` column in a table, in its order."""
    return [c[: -len(suffix)] for c in table.columns if c.endswith(suffix)]


def _block(frame: pd.DataFrame, probe: str) -> dict:
    return cloze_block(frame[f"{probe}_rank"], frame["n_candidates"], frame[f"{probe}_correct"])


def cloze_metrics(table: pd.DataFrame) -> dict:
    """{probe: {kind: {mode: {"overall", "per_source", "per_relation"}}}} of ``cloze_block``s; a source's ``p@1_macro``
    is the mean over its relations (as LAMA reports T-REx and Google-RE), its ``p@1`` pools its queries."""
    table = table.assign(kind=candidate_kind(table["candidates"]))
    out: dict = {probe: {} for probe in probes_in(table)}
    for (kind, mode), part in table.groupby(["kind", "mode"], sort=True):
        for probe in out:
            per_relation = {f"{s}/{r}": _block(p, probe) for (s, r), p in part.groupby(["source", "relation"], sort=True)}
            per_source = {}
            for source, p in part.groupby("source", sort=True):
                relation_p1 = [v["p@1"] for k, v in per_relation.items() if k.startswith(f"{source}/") and v["n"]]
                per_source[source] = {**_block(p, probe), "p@1_macro": float(np.mean(relation_p1)) if relation_p1 else None,
                                      "relations": len(relation_p1)}
            out[probe].setdefault(kind, {})[mode] = {"overall": _block(part, probe), "per_source": per_source,
                                                     "per_relation": per_relation}
    return out
