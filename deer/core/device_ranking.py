"""Cosine ranking on a torch device (the GPU path of ``deer.core.ranking.rank_cosine``).

The paper's protocol scores 93,003 queries x 40,943 entities (3.8e9 cosines).  On a GPU the
score matrix is made, ranked and cut to its top k chunk by chunk on the device; only the ranks
and top-k indices come back to the host, so neither the matrix nor FAISS is needed there.

The rank rules are those of ``deer.core.ranking`` (optimistic / pessimistic counts, invalid
scores never ahead of the gold, an invalid gold last, filtered tails and the excluded head not
competitors): the same score matrix gives the same ranks exactly (tests/test_device_ranking.py).
Scores computed on a device can differ from the CPU's in the last bit, which only matters for
candidates tied with the gold to float32 precision.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from deer.core.ranking import GoldRanks, Ranking

SCORE_BYTES_PER_CHUNK = 1 << 28  # 256 MiB of float32 scores per chunk (plus two boolean masks of a quarter each)


def gold_ranks_on_device(scores: torch.Tensor, gold: torch.Tensor, filter_tails: Sequence[np.ndarray],
                         excluded: torch.Tensor) -> tuple[GoldRanks, torch.Tensor]:
    """``deer.core.ranking.gold_ranks_from_scores`` for a (rows, candidates) tensor on any device.

    ``gold`` and ``excluded`` (-1: none) are int64 tensors on the scores' device.  Also returns
    ``valid``-cleaned scores (non-finite and excluded candidates at -inf) for the top-k."""
    rows = torch.arange(len(scores), device=scores.device)
    valid = torch.isfinite(scores)
    gold_scores = scores[rows, gold][:, None]
    higher = valid & (scores > gold_scores)
    at_least = valid & (scores >= gold_scores)
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
        filter_rows = torch.repeat_interleave(rows, torch.tensor(lengths, device=scores.device))
        filter_cols = torch.from_numpy(np.concatenate([np.asarray(f, dtype=np.int64) for f in filter_tails])).to(scores.device)
        filtered_opt -= torch.zeros_like(raw_opt).index_add_(0, filter_rows, higher[filter_rows, filter_cols].long())
        filtered_pes -= torch.zeros_like(raw_pes).index_add_(0, filter_rows, at_least[filter_rows, filter_cols].long())
    ranks = GoldRanks(*(t.double().cpu().numpy() for t in (raw_opt, raw_pes, filtered_opt, filtered_pes)))
    cleaned = torch.where(valid, scores, torch.tensor(float("-inf"), device=scores.device, dtype=scores.dtype))
    cleaned[out, excluded[out]] = float("-inf")
    return ranks, cleaned


def head_above_gold_on_device(scores: torch.Tensor, gold: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """``deer.core.ranking._head_above_gold`` on a device: the head strictly above the gold tail."""
    rows = torch.arange(len(scores), device=scores.device)
    has_head = (heads >= 0) & (heads != gold)
    head_scores = scores[rows, heads.clamp(min=0)]
    return has_head & torch.isfinite(head_scores) & (head_scores > scores[rows, gold])


def rank_cosine_on_device(query_vectors: np.ndarray, entity_vectors: np.ndarray, queries, device: str | torch.device,
                          k: int = 10, chunk_size: int | None = None) -> Ranking:
    """As ``deer.core.ranking.rank_cosine``, with scores, ranks and top-k computed on ``device``
    in chunks of queries (None: as many rows as ``SCORE_BYTES_PER_CHUNK`` of scores holds)."""
    device = torch.device(device)
    n_entities = len(entity_vectors)
    chunk_size = chunk_size or max(1, SCORE_BYTES_PER_CHUNK // (4 * max(n_entities, 1)))
    entities = torch.nn.functional.normalize(torch.as_tensor(np.asarray(entity_vectors, dtype=np.float32), device=device), dim=1)
    query_tensor = torch.as_tensor(np.asarray(query_vectors, dtype=np.float32))
    gold = torch.as_tensor(queries.gold, dtype=torch.int64)
    excluded = torch.as_tensor(queries.excluded_positions(), dtype=torch.int64)
    heads = torch.as_tensor(queries.head_positions(), dtype=torch.int64)
    excluding = bool((excluded >= 0).any())
    k_kept = min(k + excluding, n_entities)  # one more, to drop the excluded one (as rank_cosine does)
    ranks, tops, above = [], [], []
    with torch.inference_mode():
        for start in range(0, len(query_tensor), chunk_size):
            part = slice(start, min(start + chunk_size, len(query_tensor)))
            chunk = torch.nn.functional.normalize(query_tensor[part].to(device), dim=1)
            scores = chunk @ entities.T
            part_gold, part_excluded = gold[part].to(device), excluded[part].to(device)
            part_ranks, cleaned = gold_ranks_on_device(scores, part_gold, queries.filter_tails[part], part_excluded)
            ranks.append(part_ranks)
            above.append(head_above_gold_on_device(scores, part_gold, heads[part].to(device)).cpu().numpy())
            tops.append(torch.topk(cleaned, k_kept, dim=1, sorted=True).indices.cpu().numpy())
    if not ranks:  # no queries
        empty = np.zeros(0)
        return Ranking(GoldRanks(empty, empty, empty, empty), np.zeros((0, k), np.int64), np.zeros(0, dtype=bool))
    top = np.concatenate(tops).astype(np.int64)
    if excluding:
        top = np.stack([row[row != out][:k] for row, out in zip(top, excluded.numpy(), strict=True)])
    return Ranking(GoldRanks.concatenate(ranks), top, np.concatenate(above))
