"""The one rank kernel (deer.platform.ranking.rank_chunk) on every device equals the plain rank rule.

Given a score matrix the ranks must be those of the plain oracle (tests/ranking_oracle.py: ties,
NaN/inf, filtered tails and an excluded head included), the top k its stable sort, and the head flags
a direct comparison; for cosine, computed in chunks on the device, identical to the CPU on random
vectors (no float32 near-ties there).  Runs on the CPU and, where torch sees one, on CUDA.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from deer.base.vectors import normalize_rows
from deer.platform.cosine_ranking import rank_cosine
from deer.platform.ranking import rank_chunk, rank_scores
from tests.conftest import _train_queries as _queries
from tests.ranking_oracle import plain_top_k, rank_of

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


def _assert_same_ranks(ours, reference):
    for field in dataclasses.fields(reference):
        np.testing.assert_array_equal(getattr(ours, field.name), getattr(reference, field.name), err_msg=field.name)


def _plain(scores, queries, k):
    """Raw and filtered realistic ranks and top k, one row at a time, the excluded head deleted first."""
    raw, filtered, top = [], [], []
    for i, row in enumerate(np.asarray(scores, dtype=np.float64)):
        out = queries.excluded_positions()[i]
        keep = np.arange(len(row)) != out
        new_index = np.cumsum(keep) - 1
        others = np.asarray([new_index[f] for f in queries.filter_tails[i] if keep[f]], dtype=np.int64)
        raw.append(rank_of(row[keep], new_index[queries.gold[i]]))
        filtered.append(rank_of(row[keep], new_index[queries.gold[i]], others))
        top.append(plain_top_k(row, k, out))
    return np.asarray(raw), np.asarray(filtered), np.asarray(top)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exclude_head", [False, True])
def test_ranks_from_one_score_matrix_are_identical(tiny_kg_dir, device, exclude_head):
    queries = _queries(tiny_kg_dir, exclude_head)
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 4, size=(len(queries), len(queries.candidates))).astype(np.float32)  # many ties
    scores[0, 3], scores[1, queries.gold[1]], scores[2, 5] = np.nan, np.inf, -np.inf  # invalid scores, one a gold
    scores[3, queries.gold[3]] = np.nan
    assert any(len(f) for f in queries.filter_tails)
    excluded, heads = queries.excluded_positions(), queries.head_positions()
    tensor = torch.from_numpy(scores).to(device)
    ranks, top, above = rank_chunk(tensor, torch.from_numpy(queries.gold), queries.filter_tails, torch.from_numpy(excluded),
                                   torch.from_numpy(heads), k=5)
    raw, filtered, expected_top = _plain(scores, queries, 5)
    np.testing.assert_array_equal(ranks.raw, raw)
    np.testing.assert_array_equal(ranks.filtered, filtered)
    np.testing.assert_array_equal(top, expected_top)
    assert top[1, -1] != queries.gold[1] or len(queries.candidates) <= 5  # an invalid gold is not among the best
    expected_above = [bool(h >= 0 and h != g and np.isfinite(scores[i, h]) and scores[i, h] > scores[i, g])
                      for i, (h, g) in enumerate(zip(heads, queries.gold, strict=True))]
    np.testing.assert_array_equal(above, expected_above)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exclude_head", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_cosine_ranking_on_the_device_equals_numpy(tiny_kg_dir, device, exclude_head, chunk_size):
    queries = _queries(tiny_kg_dir, exclude_head)
    rng = np.random.default_rng(2)
    query_vectors = rng.normal(size=(len(queries), 16)).astype(np.float32)
    entity_vectors = rng.normal(size=(len(queries.candidates), 16)).astype(np.float32)
    entity_vectors[4] = 0  # a zero vector: cosine 0 on both paths
    reference = rank_scores(normalize_rows(query_vectors) @ normalize_rows(entity_vectors).T, queries, k=5)
    ours = rank_cosine(query_vectors, entity_vectors, queries, k=5, chunk_size=chunk_size, device=device)
    _assert_same_ranks(ours.ranks, reference.ranks)
    np.testing.assert_array_equal(ours.top, reference.top)
    np.testing.assert_array_equal(ours.head_above_gold, reference.head_above_gold)
    assert ours.top.dtype == np.int64 and ours.top.shape == (len(queries), 5)


def test_no_queries_give_empty_results(tiny_kg_dir):
    queries = _queries(tiny_kg_dir, False)
    none = dataclasses.replace(queries, triples=queries.triples[:0], gold=queries.gold[:0], filter_tails=[])
    ranking = rank_cosine(np.zeros((0, 4), np.float32), np.ones((len(queries.candidates), 4), np.float32), none)
    assert ranking.top.shape == (0, 10) and len(ranking.ranks.raw) == 0 and len(ranking.head_above_gold) == 0


class _FewCandidates:
    """Four candidates; query 0 excludes its head (position 2), query 1 has none to exclude (its head is its gold)."""

    gold = np.array([0, 1])
    filter_tails = np.array([np.array([], dtype=np.int64), np.array([3])], dtype=object)

    def excluded_positions(self):
        return np.array([2, -1])

    def head_positions(self):
        return np.array([2, 1])


def test_tiny_candidate_sets_give_one_top_k_width():
    """Bug 10: with exclude_head and fewer candidates than k, the top-k rows had unequal lengths (np.stack
    raised) and a score matrix's top k listed the excluded head last; every row now has the same width, the most
    competitors a query has (k at most), a query with fewer ending in -1, and the excluded head is never among them.
    (The width was once the fewest competitors, which left a candidate out of query 1's list.)"""
    queries = _FewCandidates()
    rng = np.random.default_rng(3)
    query_vectors, entity_vectors = rng.normal(size=(2, 8)).astype(np.float32), rng.normal(size=(4, 8)).astype(np.float32)
    for ranking in (rank_cosine(query_vectors, entity_vectors, queries, k=10), rank_scores(rng.normal(size=(2, 4)), queries, k=10)):
        assert ranking.top.shape == (2, 4)  # query 1 ranks all four (its head is its gold): none left out
        assert 2 not in ranking.top[0] and len(set(ranking.top[0][:3])) == 3 and ranking.top[0, 3] == -1
        assert sorted(ranking.top[1]) == [0, 1, 2, 3]
