"""Gold-tail ranks among candidates: the one rank kernel every probe and every device uses.

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

The kernel (:func:`rank_chunk`) is written once in torch, so the same code ranks on the CPU and
on a GPU; a (queries x candidates) chunk of scores is made once and gives the ranks, the top k and
the head-above-gold flags together.  FAISS is not on this path: exact ranks need every score of a
row, which the chunk's matrix product already holds (benchmarks/bench_ranking.py measures both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

RANK_TYPES = ("optimistic", "pessimistic", "realistic")
SCORE_BYTES_PER_CHUNK = 1 << 28  # 256 MiB of scores per chunk (plus boolean masks of a quarter each)


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

    @staticmethod
    def empty() -> GoldRanks:
        return GoldRanks(*(np.zeros(0) for _ in dataclasses.fields(GoldRanks)))


@dataclasses.dataclass
class Ranking:
    """A probe's ranking of its queries' candidates.

    ``ranks``: the gold ranks; ``top``: (n_queries, k) candidate positions, best first (k is at most
    the number of candidates, one fewer when a head is excluded);
    ``head_above_gold``: per query, True when the query's own head entity (a candidate other
    than the gold tail) scores strictly above the gold tail -- its name is in the query text, so
    an embedding probe may find it "similar".  With ``queries.exclude_head`` the head is no
    competitor (not counted in any rank, never in ``top``); ``head_above_gold`` still says how
    often it would have outranked the gold.
    """

    ranks: GoldRanks
    top: np.ndarray
    head_above_gold: np.ndarray


def _no_positions(n: int, device) -> torch.Tensor:
    return torch.full((n,), -1, dtype=torch.int64, device=device)


def rank_chunk(scores: torch.Tensor, gold: torch.Tensor, filter_tails: Sequence[np.ndarray],
               excluded: torch.Tensor | None = None, heads: torch.Tensor | None = None, k: int = 10
               ) -> tuple[GoldRanks, np.ndarray, np.ndarray]:
    """The rank kernel: (ranks, top k, head above gold) of a (rows, candidates) score tensor on any device.

    ``gold``: int64 (rows,) gold positions; ``filter_tails[i]``: candidate positions of the other
    true tails of row i (never gold); ``excluded`` (rows,): a candidate position that is no
    competitor of row i at all, raw or filtered (the query's own head with ``exclude_head``), or -1;
    ``heads`` (rows,): the query's head position for ``head_above_gold``, or -1.  Non-finite scores
    never beat or tie the gold; a non-finite gold ranks last.  ``top``: the ``k`` best candidates
    per row (invalid scores last, the excluded one never), ties in candidate order.
    """
    n_rows, n_candidates = scores.shape
    device = scores.device
    gold = gold.to(device)
    excluded = _no_positions(n_rows, device) if excluded is None else excluded.to(device)
    heads = _no_positions(n_rows, device) if heads is None else heads.to(device)
    rows = torch.arange(n_rows, device=device)
    valid = torch.isfinite(scores)
    all_valid = bool(valid.all())  # the usual case: no mask pass needed below
    gold_scores = scores[rows, gold][:, None]
    higher = scores > gold_scores
    at_least = scores >= gold_scores
    if not all_valid:
        higher &= valid
        at_least &= valid
    invalid_gold = ~valid[rows, gold]
    if bool(invalid_gold.any()):  # every competitor beats an invalid gold: the worst rank
        higher[invalid_gold] = True
        higher[rows[invalid_gold], gold[invalid_gold]] = False
        at_least[invalid_gold] = True
    out = torch.nonzero(excluded >= 0).flatten()
    higher[out, excluded[out]] = False
    at_least[out, excluded[out]] = False
    raw_opt = 1 + higher.sum(dim=1)
    raw_pes = at_least.sum(dim=1)
    filtered_opt, filtered_pes = raw_opt.clone(), raw_pes.clone()
    lengths = [len(others) for others in filter_tails]
    if sum(lengths):  # the other true tails, flattened to (row, candidate) pairs
        filter_rows = torch.repeat_interleave(rows, torch.tensor(lengths, device=device))
        filter_cols = torch.from_numpy(np.concatenate([np.asarray(f, dtype=np.int64) for f in filter_tails])).to(device)
        filtered_opt -= torch.zeros_like(raw_opt).index_add_(0, filter_rows, higher[filter_rows, filter_cols].long())
        filtered_pes -= torch.zeros_like(raw_pes).index_add_(0, filter_rows, at_least[filter_rows, filter_cols].long())
    ranks = GoldRanks(*(t.double().cpu().numpy() for t in (raw_opt, raw_pes, filtered_opt, filtered_pes)))

    has_head = (heads >= 0) & (heads != gold)
    head_scores = scores[rows, heads.clamp(min=0)]
    above = (has_head & torch.isfinite(head_scores) & (head_scores > scores[rows, gold])).cpu().numpy()

    cleaned = scores
    if not all_valid:
        cleaned = torch.where(valid, scores, torch.tensor(float("-inf"), device=device, dtype=scores.dtype))
    if len(out):
        cleaned = cleaned.clone() if cleaned is scores else cleaned  # never write into the caller's scores
        cleaned[out, excluded[out]] = float("-inf")
    width = min(k, n_candidates - bool(len(out)))  # every row has this many competitors
    return ranks, _top_k(cleaned, width, excluded), above


def _top_k(cleaned: torch.Tensor, k: int, excluded: torch.Tensor) -> np.ndarray:
    """Positions of the k best per row, best first, ties broken by position (the excluded one never)."""
    n_rows, n_candidates = cleaned.shape
    if k <= 0 or n_rows == 0:
        return np.zeros((n_rows, max(k, 0)), dtype=np.int64)
    values, positions = torch.topk(cleaned, k, dim=1)
    threshold = values[:, -1:]  # the k-th best value: everything above it is in, and some of its ties
    at = cleaned == threshold
    out = torch.nonzero(excluded >= 0).flatten()
    at[out, excluded[out]] = False  # an excluded candidate at -inf must not fill a tie at -inf
    room = k - (cleaned > threshold).sum(dim=1)
    tied = torch.nonzero(at.sum(dim=1) > room).flatten()  # more ties at the k-th value than places left
    if len(tied):  # of those ties, the first positions (topk picks among them arbitrarily)
        chosen = (cleaned[tied] > threshold[tied]) | (at[tied] & (torch.cumsum(at[tied], dim=1) <= room[tied, None]))
        positions[tied] = torch.nonzero(chosen)[:, 1].reshape(len(tied), k)
    positions = torch.sort(positions, dim=1).values  # by position, so that the stable sort below keeps ties in order
    order = torch.sort(torch.gather(cleaned, 1, positions), dim=1, descending=True, stable=True).indices
    return torch.gather(positions, 1, order).cpu().numpy().astype(np.int64)


def _chunk_rows(n_candidates: int, chunk_size: int | None) -> int:
    return chunk_size or max(1, SCORE_BYTES_PER_CHUNK // (4 * max(n_candidates, 1)))


def _query_tensors(queries) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.as_tensor(queries.gold, dtype=torch.int64), torch.as_tensor(queries.excluded_positions(), dtype=torch.int64),
            torch.as_tensor(queries.head_positions(), dtype=torch.int64))


def _ranked_chunks(chunks, queries, k: int, n_candidates: int) -> Ranking:
    """Concatenate :func:`rank_chunk` over (query slice, score tensor) chunks."""
    gold, excluded, heads = _query_tensors(queries)
    width = min(k, n_candidates - bool((excluded >= 0).any()))  # one top-k width for every chunk
    ranks, tops, above = [], [], []
    for part, scores in chunks:
        part_ranks, part_top, part_above = rank_chunk(scores, gold[part], queries.filter_tails[part], excluded[part],
                                                      heads[part], width)
        ranks.append(part_ranks)
        tops.append(part_top)
        above.append(part_above)
    if not ranks:  # no queries
        return Ranking(GoldRanks.empty(), np.zeros((0, width), np.int64), np.zeros(0, dtype=bool))
    return Ranking(GoldRanks.concatenate(ranks), np.concatenate(tops), np.concatenate(above))


def rank_scores(scores: np.ndarray, queries, k: int = 10, chunk_size: int | None = None) -> Ranking:
    """Rank a (n_queries, n_candidates) score matrix (higher = better) for ``queries`` (a QuerySet)."""
    scores = np.asarray(scores, dtype=np.float64)
    rows = _chunk_rows(scores.shape[1], chunk_size)
    chunks = ((slice(s, s + rows), torch.from_numpy(scores[s:s + rows])) for s in range(0, len(scores), rows))
    return _ranked_chunks(chunks, queries, k, scores.shape[1])


def rank_cosine(query_vectors: np.ndarray, entity_vectors: np.ndarray, queries, k: int = 10,
                chunk_size: int | None = None, device: str | torch.device = "cpu") -> Ranking:
    """As :func:`rank_scores` for cosine similarity: each chunk of queries' scores is made once on
    ``device`` (its matrix product), ranked and cut to its top k there; only ranks and positions
    come back (None: as many rows as ``SCORE_BYTES_PER_CHUNK`` of float32 scores holds)."""
    device = torch.device(device)
    entities = torch.nn.functional.normalize(torch.as_tensor(np.asarray(entity_vectors, dtype=np.float32), device=device), dim=1)
    query_tensor = torch.as_tensor(np.asarray(query_vectors, dtype=np.float32))
    rows = _chunk_rows(len(entities), chunk_size)

    def chunks():
        for start in range(0, len(query_tensor), rows):
            part = slice(start, min(start + rows, len(query_tensor)))
            yield part, torch.nn.functional.normalize(query_tensor[part].to(device), dim=1) @ entities.T

    with torch.inference_mode():
        return _ranked_chunks(chunks(), queries, k, len(entities))


def gold_ranks_from_scores(scores: np.ndarray, gold: np.ndarray, filter_tails: Sequence[np.ndarray],
                           excluded: np.ndarray | None = None) -> GoldRanks:
    """Exact ranks of ``gold[i]`` in row i of ``scores`` (n_queries, n_candidates): :func:`rank_chunk`'s ranks."""
    scores = torch.from_numpy(np.asarray(scores, dtype=np.float64))
    excluded = None if excluded is None else torch.as_tensor(np.asarray(excluded), dtype=torch.int64)
    return rank_chunk(scores, torch.as_tensor(np.asarray(gold), dtype=torch.int64), filter_tails, excluded, k=0)[0]


def top_k_from_scores(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best candidates per row, best first (invalid scores last, ties by position)."""
    cleaned = torch.from_numpy(np.asarray(scores, dtype=np.float64)).clone()
    cleaned[~torch.isfinite(cleaned)] = float("-inf")
    return _top_k(cleaned, min(k, cleaned.shape[1]), _no_positions(len(cleaned), "cpu"))


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised float32 copy (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


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


def rank_and_best(scores: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unfiltered realistic ranks of ``gold`` in each row of ``scores`` and each row's best position
    (the first of the highest valid scores): :func:`rank_chunk` without filters, for benchmarks whose
    questions have one true answer each."""
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    gold = np.atleast_1d(np.asarray(gold, dtype=np.int64))
    ranks, top, _ = rank_chunk(torch.from_numpy(scores), torch.from_numpy(gold), [()] * len(scores), k=1)
    return ranks.raw, top[:, 0]
