"""Gold-tail ranks among candidates: the one rank kernel (:func:`rank_chunk`, torch, any device).

Optimistic = 1 + #candidates strictly higher than the gold tail, pessimistic = #candidates at least
as high (gold included), realistic = their mean; filtered ranks drop the other true tails of (h, r).
Non-finite scores never beat or tie the gold tail, and a non-finite gold tail ranks last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from kg_data.queries import FilterTails

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


@dataclasses.dataclass
class Ranking:
    """A probe's ranking: gold ranks, (n_queries, k) top candidate positions, and whether each head beats the gold."""

    ranks: GoldRanks
    top: np.ndarray
    head_above_gold: np.ndarray

    @staticmethod
    def joined(parts: Sequence[tuple[GoldRanks, np.ndarray, np.ndarray]], width: int) -> Ranking:
        """One ranking of consecutive query blocks' (ranks, top, head above gold); ``width``: the top's, for no blocks."""
        if not parts:  # no queries
            no_ranks = GoldRanks(*(np.zeros(0) for _ in dataclasses.fields(GoldRanks)))
            return Ranking(no_ranks, np.zeros((0, width), np.int64), np.zeros(0, dtype=bool))
        ranks, tops, above = zip(*parts, strict=True)
        fields = (np.concatenate([getattr(r, f.name) for r in ranks]) for f in dataclasses.fields(GoldRanks))
        return Ranking(GoldRanks(*fields), np.concatenate(tops), np.concatenate(above))


def _no_positions(n: int, device) -> torch.Tensor:
    return torch.full((n,), -1, dtype=torch.int64, device=device)


def rank_chunk(scores: torch.Tensor, gold: torch.Tensor, filter_tails: Sequence[np.ndarray],
               excluded: torch.Tensor | None = None, heads: torch.Tensor | None = None, k: int = 10
               ) -> tuple[GoldRanks, np.ndarray, np.ndarray]:
    """The rank kernel: (ranks, top k, head above gold) of a (rows, candidates) score tensor on any device.

    ``filter_tails[i]``: the other true tails of row i (never gold); ``excluded`` (rows,): a candidate that is no
    competitor at all, or -1; ``heads`` (rows,): the head position for ``head_above_gold``, or -1.  ``top``: the
    ``k`` best candidates per row (invalid scores last, the excluded one never), ties in candidate order; with at
    most ``k`` candidates every one a row ranks, a row that excludes one ending in -1.
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
        higher[invalid_gold] = at_least[invalid_gold] = True
        higher[rows[invalid_gold], gold[invalid_gold]] = False
    out = torch.nonzero(excluded >= 0).flatten()
    higher[out, excluded[out]] = at_least[out, excluded[out]] = False
    raw_opt, raw_pes = 1 + higher.sum(dim=1), at_least.sum(dim=1)
    filtered_opt, filtered_pes = raw_opt.clone(), raw_pes.clone()
    pair_rows, pair_columns = FilterTails.of(filter_tails).pairs(np.arange(n_rows))  # the other true tails, as (row, candidate)
    if len(pair_rows):
        filter_rows, filter_cols = torch.from_numpy(pair_rows).to(device), torch.from_numpy(pair_columns).to(device)
        filtered_opt -= torch.zeros_like(raw_opt).index_add_(0, filter_rows, higher[filter_rows, filter_cols].long())
        filtered_pes -= torch.zeros_like(raw_pes).index_add_(0, filter_rows, at_least[filter_rows, filter_cols].long())
    ranks = GoldRanks(*(t.double().cpu().numpy() for t in (raw_opt, raw_pes, filtered_opt, filtered_pes)))

    has_head = (heads >= 0) & (heads != gold)
    head_scores = scores[rows, heads.clamp(min=0)]
    above = (has_head & torch.isfinite(head_scores) & ~invalid_gold  # an invalid gold has nothing "above" it
             & (head_scores > scores[rows, gold])).cpu().numpy()

    # invalid scores last; a copy wherever one is changed (never the caller's scores)
    cleaned = scores if all_valid and not len(out) else scores.masked_fill(~valid, float("-inf"))
    if len(out):
        cleaned[out, excluded[out]] = float("-inf")
    top = _top_k(cleaned, min(k, n_candidates - bool(len(out))), excluded)  # as many as every row has competitors
    if top.shape[1] < min(k, n_candidates):  # at most k candidates: a row that excludes none lists its last one too
        missing = np.where(excluded.cpu().numpy() >= 0, -1, n_candidates * (n_candidates - 1) // 2 - top.sum(1))
        top = np.hstack([top, missing[:, None]])  # the candidate the row left out, ranked last; -1 (none) past the end
    return ranks, top, above


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
    # more ties at the k-th value than places left, or topk took the excluded one (at -inf) to fill them
    tied = torch.nonzero((at.sum(dim=1) > room) | (positions == excluded[:, None]).any(dim=1)).flatten()
    if len(tied):  # of those ties, the first positions (topk picks among them arbitrarily)
        chosen = (cleaned[tied] > threshold[tied]) | (at[tied] & (torch.cumsum(at[tied], dim=1) <= room[tied, None]))
        positions[tied] = torch.nonzero(chosen)[:, 1].reshape(len(tied), k)
    positions = torch.sort(positions, dim=1).values  # by position, so that the stable sort below keeps ties in order
    order = torch.sort(torch.gather(cleaned, 1, positions), dim=1, descending=True, stable=True).indices
    return torch.gather(positions, 1, order).cpu().numpy().astype(np.int64)


def top_width(k: int, n_candidates: int, excluded) -> int:
    """The top lists' width: ``k``, or every candidate where there are at most ``k`` (one fewer where every query
    excludes one); a query that ranks fewer ends its list in -1."""
    excluded = np.asarray(excluded)
    return min(k, n_candidates - bool(len(excluded) and (excluded >= 0).all()))


def check_candidate_count(count: int, queries, what: str) -> None:
    """ValueError unless ``count`` (of ``what``) is the number of candidates of ``queries``, where they tell it."""
    candidates = getattr(queries, "candidates", None)
    expected = candidates if isinstance(candidates, int) or candidates is None else len(candidates)  # a count, or the set
    if expected is not None and count != expected:
        raise ValueError(f"{count} {what} for {expected} candidates of {_describe_queries(queries)}: ranked so, "
                         "every rank would count the wrong candidates; give one per candidate, in the QuerySet's order")


def _describe_queries(queries) -> str:
    kg = getattr(queries, "kg", None)
    return f"KG {kg.name!r} split {getattr(queries, 'split', None)!r}" if kg is not None else "the queries"


def rank_scores(scores: np.ndarray, queries, k: int = 10, chunk_size: int | None = None) -> Ranking:
    """Rank a (n_queries, n_candidates) score matrix (higher = better) of ``queries`` (a QuerySet, or what gives the
    kernel its ``gold``, ``filter_tails``, ``excluded_positions()`` and ``head_positions()``); another shape is refused
    (ValueError)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != len(queries.gold):
        rows = scores.shape[0] if scores.ndim else 0
        raise ValueError(f"a score matrix of {rows} rows (shape {scores.shape}) for {len(queries.gold)} queries of "
                         f"{_describe_queries(queries)}: give one row per query, in the QuerySet's order")
    check_candidate_count(scores.shape[1], queries, "columns of the score matrix")
    return rank_rows(scores.__getitem__, len(scores), scores.shape[1], queries, k, chunk_size)


def rank_rows(rows_of, n_rows: int, n_candidates: int, queries, k: int = 10, chunk_size: int | None = None) -> Ranking:
    """The chunked form of ``rank_chunk``: rows ``rows_of(slice)`` (float64, n_candidates wide) of a score matrix made
    ``chunk_size`` at a time (None: as many as ``SCORE_BYTES_PER_CHUNK`` holds), ranked with ``queries``' known answers
    (``rank_scores``' ``queries``, its rows in order) into one ``Ranking``, its top lists one width for every chunk."""
    rows = chunk_size or max(1, SCORE_BYTES_PER_CHUNK // (4 * max(n_candidates, 1)))
    gold, excluded, heads = (torch.as_tensor(np.asarray(positions), dtype=torch.int64)
                             for positions in (queries.gold, queries.excluded_positions(), queries.head_positions()))
    width = top_width(k, n_candidates, excluded)
    parts = [rank_chunk(torch.from_numpy(np.asarray(rows_of(at), dtype=np.float64)), gold[at], queries.filter_tails[at],
                        excluded[at], heads[at], width)
             for at in (slice(s, s + rows) for s in range(0, n_rows, rows))]
    return Ranking.joined(parts, width)


def candidate_counts(n_candidates: int, filter_tails: Sequence[np.ndarray], filtered: bool,
                     excluded: np.ndarray | None = None) -> np.ndarray:
    """Competitors each query's gold tail is ranked among (an ``excluded`` candidate, -1: none, is none)."""
    n = len(filter_tails)
    excluded = np.full(n, -1, dtype=np.int64) if excluded is None else np.asarray(excluded, dtype=np.int64)
    n_filters, excluded_in_filters = filter_counts(filter_tails, np.arange(n), excluded)
    counts = np.full(n, n_candidates, dtype=np.float64) - (excluded >= 0)
    return counts - (n_filters - excluded_in_filters) if filtered else counts


def filter_counts(filter_tails: Sequence[np.ndarray], rows: np.ndarray, excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For query ``rows``: how many known-true other tails each has, and whether its ``excluded`` one is one of them."""
    filters = FilterTails.of(filter_tails)
    pair_rows, positions = filters.pairs(rows)
    excluded = np.asarray(excluded, dtype=np.int64)
    hit = positions == excluded[pair_rows]  # -1 is never a position
    return filters.lengths(rows), np.bincount(pair_rows[hit], minlength=len(rows)) > 0
