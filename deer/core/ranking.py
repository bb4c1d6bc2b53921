"""Gold-tail ranks among candidates, shared by every probe (DEER, BEAR, LAMA).

A rank is computed exactly from scores (higher = better):
  optimistic  = 1 + #candidates scoring strictly higher than the gold tail
  pessimistic = #candidates scoring at least as high (the gold tail included)
  realistic   = their mean (the expected rank under random tie-breaking; reported)
Filtered ranks drop the other known-true tails of (h, r) from the competitors (PyKEEN's
"filtered" setting).

Non-finite scores (NaN, +inf, -inf) are invalid, not extreme: a candidate with one never
counts as beating or tying the gold tail (as PyKEEN, whose comparisons are false for NaN), and
a gold tail with one gets the worst rank, behind every competitor (rank = number of
competitors, itself included: n_candidates raw, n_candidates - filtered tails filtered), so a
failed score can never look like knowledge.  In top-k lists invalid scores come last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

RANK_TYPES = ("optimistic", "pessimistic", "realistic")


@dataclasses.dataclass
class GoldRanks:
    """Per-query ranks (float64 arrays of shape (n_queries,), 1 = best)."""

    raw_optimistic: np.ndarray
    raw_pessimistic: np.ndarray
    filtered_optimistic: np.ndarray
    filtered_pessimistic: np.ndarray

    @property
    def raw(self) -> np.ndarray:
        return (self.raw_optimistic + self.raw_pessimistic) / 2

    @property
    def filtered(self) -> np.ndarray:
        return (self.filtered_optimistic + self.filtered_pessimistic) / 2

    @staticmethod
    def concatenate(parts: Sequence[GoldRanks]) -> GoldRanks:
        return GoldRanks(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(GoldRanks)))


def _clean(scores: np.ndarray) -> np.ndarray:
    """Invalid (non-finite) scores as -inf, so they sort last (top-k lists only)."""
    return np.where(np.isfinite(scores), scores, -np.inf)


def gold_ranks_from_scores(scores: np.ndarray, gold: np.ndarray, filter_tails: Sequence[np.ndarray],
                           excluded: np.ndarray | None = None) -> GoldRanks:
    """Exact ranks of ``gold[i]`` in row i of ``scores`` (n_queries, n_candidates).

    ``filter_tails[i]``: candidate positions of the other true tails of query i (never gold).
    ``excluded[i]``: a candidate position that is not a competitor of query i at all, raw or
    filtered (the query's own head with ``exclude_head``), or -1.
    Non-finite candidate scores never beat or tie the gold; a non-finite gold score ranks last
    (see the module docstring).
    """
    scores = np.asarray(scores, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    rows = np.arange(len(scores))
    valid = np.isfinite(scores)
    gold_scores = scores[rows, gold][:, None]
    higher = valid & (scores > gold_scores)
    at_least = valid & (scores >= gold_scores)
    invalid_gold = ~valid[rows, gold]
    if invalid_gold.any():  # every competitor beats an invalid gold: the worst rank
        higher[invalid_gold] = True
        higher[rows[invalid_gold], gold[invalid_gold]] = False
        at_least[invalid_gold] = True
    if excluded is not None:
        rows_out = np.flatnonzero(np.asarray(excluded) >= 0)
        higher[rows_out, excluded[rows_out]] = False
        at_least[rows_out, excluded[rows_out]] = False
    raw_opt = 1 + higher.sum(axis=1)
    raw_pes = at_least.sum(axis=1)
    filtered_opt = raw_opt.astype(np.float64).copy()
    filtered_pes = raw_pes.astype(np.float64).copy()
    for i, others in enumerate(filter_tails):
        if len(others):
            filtered_opt[i] -= higher[i, others].sum()
            filtered_pes[i] -= at_least[i, others].sum()
    return GoldRanks(raw_opt.astype(np.float64), raw_pes.astype(np.float64), filtered_opt, filtered_pes)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised float32 copy (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def cosine_score_chunks(query_vectors: np.ndarray, entity_vectors: np.ndarray, chunk_size: int = 512) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield (query slice, cosine scores (chunk, n_entities)) without holding the full matrix."""
    queries = normalize_rows(query_vectors)
    entities = normalize_rows(entity_vectors)
    for start in range(0, len(queries), chunk_size):
        part = slice(start, min(start + chunk_size, len(queries)))
        yield part, queries[part] @ entities.T


def cosine_gold_ranks(
    query_vectors: np.ndarray, entity_vectors: np.ndarray, gold: np.ndarray, filter_tails: Sequence[np.ndarray], chunk_size: int = 512
) -> GoldRanks:
    """Exact gold ranks under cosine similarity, chunked over queries."""
    parts = [
        gold_ranks_from_scores(scores, gold[part], filter_tails[part])
        for part, scores in cosine_score_chunks(query_vectors, entity_vectors, chunk_size)
    ]
    return GoldRanks.concatenate(parts)


@dataclasses.dataclass
class Ranking:
    """A probe's ranking of its queries' candidates.

    ``ranks``: the gold ranks; ``top``: (n_queries, k) candidate positions, best first;
    ``head_above_gold``: per query, True when the query's own head entity (a candidate other
    than the gold tail) scores strictly above the gold tail -- its name is in the query text, so
    an embedding probe may find it "similar".  With ``queries.exclude_head`` the head is no
    competitor (not counted in any rank, never in ``top``); ``head_above_gold`` still says how
    often it would have outranked the gold.
    """

    ranks: GoldRanks
    top: np.ndarray
    head_above_gold: np.ndarray


def _head_above_gold(scores: np.ndarray, gold: np.ndarray, heads: np.ndarray) -> np.ndarray:
    rows = np.arange(len(scores))
    has_head = (heads >= 0) & (heads != gold)
    head_scores = np.where(has_head, scores[rows, np.maximum(heads, 0)], -np.inf)
    return has_head & np.isfinite(head_scores) & (head_scores > scores[rows, gold])


def rank_scores(scores: np.ndarray, queries, k: int = 10) -> Ranking:
    """Rank a (n_queries, n_candidates) score matrix (higher = better) for ``queries`` (a QuerySet)."""
    scores = np.asarray(scores, dtype=np.float64)
    excluded = queries.excluded_positions()
    ranks = gold_ranks_from_scores(scores, queries.gold, queries.filter_tails, excluded)
    heads = queries.head_positions()
    above = _head_above_gold(scores, queries.gold, heads)
    rows = np.flatnonzero(excluded >= 0)
    if len(rows):  # an excluded candidate never appears in a top-k list
        scores = scores.copy()
        scores[rows, excluded[rows]] = -np.inf
    return Ranking(ranks, top_k_from_scores(scores, k), above)


def rank_cosine(query_vectors: np.ndarray, entity_vectors: np.ndarray, queries, k: int = 10, chunk_size: int = 512) -> Ranking:
    """As :func:`rank_scores` for cosine similarity, chunked over queries (exact ranks; top-k by FAISS)."""
    excluded, heads = queries.excluded_positions(), queries.head_positions()
    ranks, above = [], []
    for part, scores in cosine_score_chunks(query_vectors, entity_vectors, chunk_size):
        ranks.append(gold_ranks_from_scores(scores, queries.gold[part], queries.filter_tails[part], excluded[part]))
        above.append(_head_above_gold(scores, queries.gold[part], heads[part]))
    if not ranks:  # no queries
        return Ranking(gold_ranks_from_scores(np.zeros((0, 1)), np.zeros(0, np.int64), []), np.zeros((0, k), np.int64),
                       np.zeros(0, dtype=bool))
    excluding = bool((excluded >= 0).any())
    _, top = faiss_top_k(query_vectors, entity_vectors, k + excluding)  # one more, to drop the excluded one
    if excluding:
        top = np.stack([row[row != out][:k] for row, out in zip(top, excluded, strict=True)])
    return Ranking(GoldRanks.concatenate(ranks), top, np.concatenate(above))


def faiss_top_k(query_vectors: np.ndarray, entity_vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine top-k with FAISS IndexFlatIP on L2-normalised float32: (scores, indices)."""
    import faiss

    entities = normalize_rows(entity_vectors)
    index = faiss.IndexFlatIP(entities.shape[1])
    index.add(entities)
    k = min(k, len(entities))
    return index.search(normalize_rows(query_vectors), k)


def top_k_from_scores(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best candidates per row, best first (for likelihood probes)."""
    scores = _clean(np.asarray(scores, dtype=np.float64))
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def candidate_counts(n_candidates: int, filter_tails: Sequence[np.ndarray], filtered: bool,
                     excluded: np.ndarray | None = None) -> np.ndarray:
    """Competitors each query's gold tail is ranked among (for the random baseline); an
    ``excluded`` candidate (-1: none) is no competitor, filtered or not."""
    counts = np.full(len(filter_tails), n_candidates, dtype=np.float64)
    if filtered:
        counts -= np.asarray([len(f) for f in filter_tails], dtype=np.float64)
    if excluded is not None:
        for i, (out, others) in enumerate(zip(excluded, filter_tails, strict=True)):
            if out >= 0 and not (filtered and out in others):
                counts[i] -= 1
    return counts


def rank_of(scores_row: np.ndarray, gold: int, filter_positions: np.ndarray | None = None) -> float:
    """Plain realistic rank of one query, written for clarity; used by tests as the reference.

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
