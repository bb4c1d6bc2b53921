"""Exact cosine ranks (DEER's), streamed over blocks of candidate vectors (``rank_cosine``): no score matrix of all
candidates, which may stay in a store on disk.

:func:`deer.platform.ranking.rank_chunk`'s rule holds for this kernel's scores, float32 entries of blockwise matrix
products, whose rounding depends on the block shapes and device: two cosines equal in exact arithmetic may come out
about 1e-7 apart in one block size and equal in another, the only case where results differ from ``rank_chunk``.
A candidate holding the gold's own vector (an entity of the same prompt) always ties it, in any column or block.

Until the gold's block is reached its score is only estimated, so a candidate counts as higher at once only above
the estimate plus ``TIE_BAND``; one within the band is compared with the gold's computed score at the end.  A query
whose computed gold score lies outside the band is ranked again with ``WIDE_BAND``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from deer.base.prefetch import read_ahead
from deer.base.vectors import normalize_rows
from deer.platform.ranking import (
    SCORE_BYTES_PER_CHUNK,
    GoldRanks,
    Ranking,
    _top_k,
    check_candidate_count,
    filter_counts,
    top_width,
)
from kg_data.queries import FilterTails

TIE_BAND = 1e-6  # cosine units: the two roundings of a gold's score differ by far less (at most 6e-8 measured
#   at 576 to 4,096 dimensions); each query meets about |E| x 2 x TIE_BAND / (spread of its scores) near-ties
WIDE_BAND = 1e-3  # for the (rare) query whose two roundings differ by more: ranked again with this band
MAX_QUERY_BLOCK = 65_536  # queries scored against one candidate block at a time (all of a KG's test split)


def rank_cosine(query_vectors: np.ndarray, candidate_vectors, queries, k: int = 10, chunk_size: int | None = None,
                device: str | torch.device = "cpu", show_progress: bool = False) -> Ranking:
    """Rank each query's gold tail by cosine among ``candidate_vectors``: an (n, d) array, or a store's vectors
    (``rows(positions)`` and ``blocks(size)``, as ``deer.embedding_probe.StoredPrompts``) read block by block.
    ``chunk_size``: queries per pass over the candidates (None: all, up to ``MAX_QUERY_BLOCK``).  Vectors of
    another count than the queries' candidates are refused (ValueError)."""
    source = candidate_vectors if hasattr(candidate_vectors, "blocks") else _ArrayBlocks(candidate_vectors)
    check_candidate_count(len(source), queries, "candidate vectors")
    query_block = chunk_size or max(1, min(len(query_vectors), MAX_QUERY_BLOCK))
    rows = max(1, min(len(source), SCORE_BYTES_PER_CHUNK // (4 * query_block)))
    gold_vectors = source.rows(np.asarray(queries.gold, dtype=np.int64))
    passes = -(-len(query_vectors) // query_block) if len(query_vectors) else 0
    with tqdm(total=len(source) * passes, desc="ranking", unit="candidate", disable=not show_progress or len(source) < 100_000) as bar:

        def blocks():
            for where, vectors in read_ahead(source.blocks(rows)):  # the next block read while this one is scored
                yield where, vectors
                bar.update(len(vectors))

        return rank_cosine_blocks(query_vectors, gold_vectors, blocks, len(source), queries, k, query_block, device)


class _ArrayBlocks:
    def __init__(self, vectors):
        self.vectors = np.asarray(vectors, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.vectors)

    def rows(self, positions) -> np.ndarray:
        return self.vectors[positions]

    def blocks(self, size: int):
        return ((start, self.vectors[start:start + size]) for start in range(0, len(self.vectors), size))


@dataclasses.dataclass
class _QueryBlockState:
    """What one block of queries accumulates over the candidate blocks (tensors on the ranking device)."""

    higher: torch.Tensor  # (B,) candidates clearly above the gold, gold and excluded never counted
    higher_filtered: torch.Tensor  # (B,) of those, the known-true others (subtracted for filtered ranks)
    gold_score: torch.Tensor  # (B,) the exact score, NaN until the gold's block
    head_score: torch.Tensor  # (B,) NaN until the head's block (or no head)
    band_rows: list  # near-ties: query row, score, whether the candidate is a filtered tail
    band_scores: list
    band_filtered: list
    top_values: np.ndarray  # (B, <=k) best first
    top_positions: np.ndarray


def _merge_top(values: np.ndarray, positions: np.ndarray, new_values: np.ndarray, new_positions: np.ndarray,
               k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of two (B, *) top lists, best first, ties by candidate position."""
    values, positions = np.concatenate([values, new_values], 1), np.concatenate([positions, new_positions], 1)
    order = np.lexsort((positions, -values), axis=1)[:, :k]
    return np.take_along_axis(values, order, 1), np.take_along_axis(positions, order, 1)


def rank_cosine_blocks(query_vectors: np.ndarray, gold_vectors: np.ndarray,
                       candidate_blocks: Iterable[tuple[int, np.ndarray]] | Callable[[], Iterable[tuple[int, np.ndarray]]],
                       n_candidates: int, queries, k: int = 10, query_block: int = 4096,
                       device: str | torch.device = "cpu", band: float = TIE_BAND) -> Ranking:
    """Rank every query's gold tail among ``n_candidates`` whose vectors arrive as ``(where, (n, d) array)``
    blocks, ``where`` a start or the rows' ascending candidate positions; every candidate in exactly one block, in
    any order (a list, or a function giving them anew for each pass of ``query_block`` queries).  ``gold_vectors``:
    each query's gold vector (to place the tie band); ``queries``: what a QuerySet gives the kernel.  Counts that
    disagree with the queries, and blocks that do not hold each candidate once, are refused (ValueError).
    """
    gold, filters = np.asarray(queries.gold, dtype=np.int64), FilterTails.of(queries.filter_tails)
    check_candidate_count(n_candidates, queries, "candidates (n_candidates)")
    for name, vectors in (("query vectors", query_vectors), ("gold vectors", gold_vectors)):
        if len(vectors) != len(gold):
            raise ValueError(f"{len(vectors)} {name} for {len(gold)} queries: give one per query, in the queries' order")
    excluded, heads = np.asarray(queries.excluded_positions(), np.int64), np.asarray(queries.head_positions(), np.int64)
    read = candidate_blocks if callable(candidate_blocks) else lambda: iter(candidate_blocks)
    device = torch.empty(0, device=device).device  # "cuda" as "cuda:0": the reused buffers are kept per device, compared
    return _rank_blocks(query_vectors, gold_vectors, read, n_candidates, (gold, filters, excluded, heads),
                        top_width(k, n_candidates, excluded), query_block, device, band)


def _rank_blocks(query_vectors, gold_vectors, read: Callable[[], Iterable[tuple[int, np.ndarray]]], n_candidates: int,
                 query_arrays: tuple, width: int, query_block: int, device: torch.device, band: float) -> Ranking:
    gold, filters, excluded, heads = query_arrays
    n_queries = len(query_vectors)
    query_tensor = normalize_rows(torch.as_tensor(np.asarray(query_vectors, np.float32)))
    gold_tensor = torch.as_tensor(np.asarray(gold_vectors, np.float32))
    approx_gold = (query_tensor * normalize_rows(gold_tensor)).sum(1)
    starts = range(0, n_queries, query_block) if n_queries else ()
    blocks = [range(start, min(start + query_block, n_queries)) for start in starts]
    states = [_new_state(len(rows), device) for rows in blocks]
    with torch.inference_mode():
        for rows, state in zip(blocks, states, strict=True):  # one pass over the candidates per block of queries
            _scan(state, query_tensor[rows.start:rows.stop].to(device), approx_gold[rows.start:rows.stop].to(device),
                  gold_tensor[rows.start:rows.stop].to(device), read(), rows, gold, excluded, heads, filters, width, device, band,
                  n_candidates)
    ranking = Ranking.joined([_finish(state, rows, n_candidates, excluded, heads, gold, filters, width)
                              for rows, state in zip(blocks, states, strict=True)], width)
    if not n_queries:
        return ranking
    exact = torch.cat([state.gold_score.cpu() for state in states]).double()
    outside = np.flatnonzero((torch.isfinite(exact) & ((exact - approx_gold.double()).abs() > band)).numpy())
    if len(outside) and band < WIDE_BAND:  # counts made against the wrong side of the band: made again
        again = _rank_blocks(np.asarray(query_vectors)[outside], np.asarray(gold_vectors)[outside], read, n_candidates,
                             (gold[outside], filters.take(outside), excluded[outside], heads[outside]), width, query_block, device,
                             WIDE_BAND)
        for field in dataclasses.fields(GoldRanks):
            getattr(ranking.ranks, field.name)[outside] = getattr(again.ranks, field.name)
        ranking.top[outside] = again.top
        ranking.head_above_gold[outside] = again.head_above_gold
    return ranking


def _new_state(n: int, device) -> _QueryBlockState:
    zeros = torch.zeros(n, dtype=torch.int64, device=device)
    nan = torch.full((n,), float("nan"), device=device)
    return _QueryBlockState(zeros, zeros.clone(), nan, nan.clone(), [], [], [], np.zeros((n, 0), np.float32),
                            np.zeros((n, 0), np.int64))


def _scan(state: _QueryBlockState, block_queries, approx_gold, gold_vectors, candidate_blocks, rows: range, gold, excluded, heads,
          filters: FilterTails, width: int, device, band: float, n_candidates: int) -> None:
    """Accumulate one block of queries over every candidate block (two counts and a top k besides the product)."""
    filter_rows, filter_positions = filters.pairs(np.arange(rows.start, rows.stop))
    filter_excluded = excluded[rows.start + filter_rows]  # a filtered tail that is excluded is no competitor at all
    block_gold, block_excluded, block_heads = (torch.as_tensor(a[rows.start:rows.stop], device=device)
                                               for a in (gold, excluded, heads))
    queries_finite = bool(torch.isfinite(block_queries).all())
    lower, upper = (approx_gold - band)[:, None], (approx_gold + band)[:, None]
    buffers = _Buffers()
    seen = np.zeros(n_candidates, dtype=bool)  # the candidates the blocks held so far
    for where, vectors in candidate_blocks:
        vectors = torch.as_tensor(np.asarray(vectors, np.float32)).to(device)
        columns = _block_positions(where, len(vectors))  # each column's candidate position, ascending
        outside = columns[(columns < 0) | (columns >= n_candidates)]
        if len(outside):
            raise ValueError(f"a block of candidate vectors holds candidate position {outside[0]}, outside the {n_candidates} "
                             f"candidates (0..{n_candidates - 1}): the blocks must hold each candidate once")
        if (np.diff(columns) <= 0).any() or seen[columns].any():
            raise ValueError("a block of candidate vectors holds its positions out of ascending order, or a candidate held "
                             "twice: the blocks must hold each candidate once, each block's positions ascending")
        seen[columns] = True
        columns_t = torch.as_tensor(columns, device=device)
        norms = torch.linalg.vector_norm(vectors, dim=1, keepdim=True)
        finite = bool(torch.isfinite(norms).all())  # a finite norm: finite values
        unit = normalize_rows(vectors, norms, out=buffers.take("unit", vectors.shape, device))
        scores = torch.mm(block_queries, unit.T, out=buffers.take("scores", (len(block_queries), len(vectors)), device))
        if not (queries_finite and finite):  # an invalid score never counts, and sorts last
            scores = scores.masked_fill(~torch.isfinite(scores), float("-inf"))
        # the queries whose gold, excluded candidate or head falls in this block, and those columns
        (has_gold, gold_col), (has_excluded, excluded_col), (has_head, head_col) = (
            _located(columns_t, positions) for positions in (block_gold, block_excluded, block_heads))
        state.gold_score[has_gold] = scores[has_gold, gold_col]
        # a head with the gold's own vector (the same prompt) ties it, however the product rounded: never above (NaN)
        head_same = _same(vectors, gold_vectors, head_col, has_head)
        state.head_score[has_head] = scores[has_head, head_col].masked_fill(head_same, float("nan"))
        clearly_higher = buffers.count(torch.gt, scores, upper)
        near = buffers.count(torch.ge, scores, lower) - clearly_higher
        for here, cells in ((has_gold, gold_col), (has_excluded, excluded_col)):  # never competitors
            own = scores[here, cells]
            clearly = own > upper[here, 0]
            clearly_higher.index_add_(0, here, -clearly.long())
            near.index_add_(0, here, -((own >= lower[here, 0]) & ~clearly).long())
        state.higher += clearly_higher
        f_cols = np.minimum(np.searchsorted(columns, filter_positions), len(columns) - 1)
        in_block = (columns[f_cols] == filter_positions) & (filter_positions != filter_excluded)
        f_rows, f_cols = filter_rows[in_block], f_cols[in_block]
        if len(f_rows):
            f_rows_t = torch.as_tensor(f_rows, device=device)
            clearly = (scores[f_rows_t, torch.as_tensor(f_cols, device=device)] > upper[f_rows_t, 0]).long()
            state.higher_filtered.index_add_(0, f_rows_t, clearly)
        _keep_near_ties(state, scores, near, lower, upper, (has_gold, gold_col), (has_excluded, excluded_col),
                        f_rows * len(columns) + f_cols, (vectors, gold_vectors))
        scores[has_excluded, excluded_col] = float("-inf")
        _update_top(state, scores, columns, has_excluded, excluded_col, excluded[rows.start:rows.stop], width + 1, buffers)
    if seen.sum() != n_candidates:
        raise ValueError(f"the blocks held {seen.sum()} candidate vectors for {n_candidates} candidates: the blocks must hold "
                         "each candidate once")


def _update_top(state: _QueryBlockState, scores: torch.Tensor, columns: np.ndarray, has_excluded, excluded_col,
                block_excluded: np.ndarray, keep: int, buffers: _Buffers) -> None:
    """Merge the block's best ``keep`` of each row into the running top lists (the excluded candidate as NaN: last)."""
    n_rows = scores.shape[0]
    excluded_local = torch.full((n_rows,), -1, dtype=torch.int64, device=scores.device)
    excluded_local[has_excluded] = excluded_col
    if state.top_values.shape[1] == keep:
        last = state.top_values[:, -1].astype(np.float32)
        last[np.isnan(last)] = -np.inf  # the excluded candidate, marked NaN, is last: any score enters
        rows = (buffers.count(torch.ge, scores, torch.as_tensor(last, device=scores.device)[:, None]) > 0).nonzero().flatten()
        if len(rows) > n_rows // 2:  # most rows: all of them, without copying their scores
            rows = torch.arange(n_rows, device=scores.device)
        elif len(rows):
            scores, excluded_local = scores[rows], excluded_local[rows]
        rows = rows.cpu().numpy()
    else:
        rows = np.arange(n_rows)
    if not len(rows):
        return
    local = _block_top(scores, min(keep, scores.shape[1]), excluded_local)
    values = torch.gather(scores, 1, torch.as_tensor(local, device=scores.device)).cpu().numpy()
    positions = columns[local]
    is_out = positions == block_excluded[rows, None]
    merged = _merge_top(state.top_values[rows], state.top_positions[rows], np.where(is_out, np.nan, values), positions, keep)
    if len(rows) == n_rows:  # the lists may still be growing to ``keep``: replaced whole
        state.top_values, state.top_positions = merged
    else:  # full lists: only the rows that changed
        state.top_values[rows], state.top_positions[rows] = merged


class _Buffers:
    """Tensors reused from block to block (a fresh 256 MiB matrix's page faults cost a tenth of the product's time)."""

    def __init__(self):
        self.held: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        size = int(np.prod(shape))
        held = self.held.get(name)
        if held is None or held.numel() < size or held.device != torch.device(device) or held.dtype != dtype:
            held = self.held[name] = torch.empty(size, dtype=dtype, device=device)
        return held[:size].view(*shape)

    def count(self, compare, scores: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
        """Counts of a comparison per row, as 0/1 floats summed: several times faster on a CPU than a boolean mask's
        sum (float64 once a row is longer than float32 counts exactly)."""
        dtype = torch.float32 if scores.shape[1] < 1 << 24 else torch.float64
        return compare(scores, bound, out=self.take("flags", scores.shape, scores.device, dtype)).sum(1).long()


def _same(vectors: torch.Tensor, gold_vectors: torch.Tensor, columns: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Whether candidate ``columns`` of a block hold exactly their query ``rows``' gold vector."""
    return (vectors[columns] == gold_vectors[rows]).all(1)


def _keep_near_ties(state, scores, near, lower, upper, gold_cells, excluded_cells, filter_keys, vectors) -> None:
    """Keep the scores within the band (not the gold's nor the excluded one's), and whether each is a filtered tail.
    A candidate with the gold's own vector (an entity of the same prompt) is kept as NaN: a tie with the gold, which a
    product of the same vectors in another column or block may miss by a rounding."""
    rows = (near > 0).nonzero().flatten()
    if not len(rows):
        return
    width = scores.shape[1]
    block = scores[rows]
    local_rows, columns = ((block >= lower[rows]) & (block <= upper[rows])).nonzero(as_tuple=True)
    query_rows = rows[local_rows]
    keys = (query_rows * width + columns).cpu().numpy()
    skipped = np.concatenate([(here * width + cols).cpu().numpy() for here, cols in (gold_cells, excluded_cells)])
    kept = ~np.isin(keys, skipped)
    state.band_rows.append(query_rows.cpu().numpy()[kept])
    same = _same(*vectors, columns, query_rows)
    state.band_scores.append(block[local_rows, columns].masked_fill(same, float("nan")).cpu().numpy()[kept])
    state.band_filtered.append(np.isin(keys[kept], filter_keys))


def _block_positions(where, n: int) -> np.ndarray:
    """A block's candidate positions: ``where`` itself (ascending), or ``where`` + 0..n-1 for a start."""
    if isinstance(where, (int, np.integer)):
        return np.arange(where, where + n, dtype=np.int64)
    return np.asarray(where, dtype=np.int64)


def _located(columns: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query rows whose ``positions`` entry is one of this block's ``columns``, its column there)."""
    column = torch.searchsorted(columns, positions).clamp(max=len(columns) - 1)
    here = ((columns[column] == positions) & (positions >= 0)).nonzero().flatten()
    return here, column[here]


def _block_top(scores: torch.Tensor, k: int, excluded_local: torch.Tensor, extra: int = 8) -> np.ndarray:
    """``_top_k`` of a block by one ``topk`` of ``k + extra``; rows whose ties may reach past it by ``_top_k`` itself."""
    n_rows, n = scores.shape
    taken = min(k + extra, n)
    values, positions = torch.topk(scores, taken, dim=1)
    order = np.lexsort((positions.cpu().numpy(), -values.cpu().numpy().astype(np.float64)), axis=1)[:, :k]
    top = np.take_along_axis(positions.cpu().numpy(), order, 1).astype(np.int64)
    if taken < n:
        unsure = (values[:, taken - 1] == values[:, k - 1]).nonzero().flatten()
        if len(unsure):
            top[unsure.cpu().numpy()] = _top_k(scores[unsure], k, excluded_local[unsure])
    return top


def _finish(state: _QueryBlockState, rows: range, n_candidates: int, excluded, heads, gold, filters: FilterTails,
            width: int):
    """Resolve the near-ties against each gold's exact score; the block's (ranks, top of ``width``, head above gold)."""
    n = len(rows)
    gold_score = state.gold_score.cpu().numpy().astype(np.float64)
    higher = state.higher.cpu().numpy().astype(np.int64)
    higher_filtered = state.higher_filtered.cpu().numpy().astype(np.int64)
    at_least, at_least_filtered = higher.copy(), higher_filtered.copy()
    if state.band_rows:
        band_rows, band_filtered = np.concatenate(state.band_rows), np.concatenate(state.band_filtered)
        band_scores = np.concatenate(state.band_scores).astype(np.float64)
        band_scores = np.where(np.isnan(band_scores), gold_score[band_rows], band_scores)  # the gold's vector: a tie
        above, tied = band_scores > gold_score[band_rows], band_scores >= gold_score[band_rows]
        for counts, hits in ((higher, above), (at_least, tied), (higher_filtered, above & band_filtered),
                             (at_least_filtered, tied & band_filtered)):
            np.add.at(counts, band_rows, hits)
    block_excluded = excluded[rows.start:rows.stop]
    n_filters, excluded_in_filters = filter_counts(filters, np.arange(rows.start, rows.stop), block_excluded)
    invalid_gold = ~np.isfinite(gold_score)
    if invalid_gold.any():  # every competitor beats an invalid gold: the worst rank (``rank_chunk``'s rule)
        higher[invalid_gold] = at_least[invalid_gold] = (n_candidates - 1 - (block_excluded >= 0))[invalid_gold]
        higher_filtered[invalid_gold] = at_least_filtered[invalid_gold] = (n_filters - excluded_in_filters)[invalid_gold]
    raw_opt, raw_pes = 1 + higher, 1 + at_least
    ranks = GoldRanks(*(a.astype(np.float64) for a in (raw_opt, raw_pes, raw_opt - higher_filtered, raw_pes - at_least_filtered)))
    block_heads = heads[rows.start:rows.stop]
    head_score = state.head_score.cpu().numpy().astype(np.float64)
    has_head = (block_heads >= 0) & (block_heads != gold[rows.start:rows.stop])
    with np.errstate(invalid="ignore"):
        head_above = has_head & np.isfinite(head_score) & np.isfinite(gold_score) & (head_score > gold_score)
    keep = ~np.isnan(state.top_values)  # the excluded candidate, marked NaN, leaves the list
    top = np.full((n, width), -1, np.int64)  # a query that ranks fewer candidates than the width: -1 past its last
    for i in range(n):
        listed = state.top_positions[i][keep[i]][:width]
        top[i, :len(listed)] = listed
    return ranks, top, head_above
