"""The device ranking path (deer.core.device_ranking) equals the numpy one (deer.core.ranking).

Given the same score matrix the ranks must be identical (ties, NaN/inf, filtered tails and an
excluded head included); for cosine, computed in chunks on the device, identical to rank_cosine on
random vectors (no float32 near-ties there).  Runs on the CPU and, where torch sees one, on CUDA.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from deer.core.device_ranking import gold_ranks_on_device, head_above_gold_on_device, rank_cosine_on_device
from deer.core.ranking import gold_ranks_from_scores, rank_cosine
from kg_data.load import load_kg
from kg_data.queries import build_queries

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


def _queries(tiny_kg_dir, exclude_head):
    return build_queries(load_kg(tiny_kg_dir), "train", exclude_head=exclude_head)  # 9 queries sharing heads


def _assert_same_ranks(ours, reference):
    for field in dataclasses.fields(reference):
        np.testing.assert_array_equal(getattr(ours, field.name), getattr(reference, field.name), err_msg=field.name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exclude_head", [False, True])
def test_ranks_from_one_score_matrix_are_identical(tiny_kg_dir, device, exclude_head):
    queries = _queries(tiny_kg_dir, exclude_head)
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 4, size=(len(queries), len(queries.candidates))).astype(np.float32)  # many ties
    scores[0, 3], scores[1, queries.gold[1]], scores[2, 5] = np.nan, np.inf, -np.inf  # invalid scores, one a gold
    scores[3, queries.gold[3]] = np.nan
    assert any(len(f) for f in queries.filter_tails)
    excluded = queries.excluded_positions()
    reference = gold_ranks_from_scores(scores, queries.gold, queries.filter_tails, excluded)
    tensor = torch.from_numpy(scores).to(device)
    gold = torch.from_numpy(queries.gold).to(device)
    ours, cleaned = gold_ranks_on_device(tensor, gold, queries.filter_tails, torch.from_numpy(excluded).to(device))
    _assert_same_ranks(ours, reference)
    assert torch.isneginf(cleaned[0, 3]) and torch.isneginf(cleaned[1, queries.gold[1]])
    heads = queries.head_positions()
    expected_above = [bool(h >= 0 and h != g and np.isfinite(scores[i, h]) and scores[i, h] > scores[i, g])
                      for i, (h, g) in enumerate(zip(heads, queries.gold, strict=True))]
    above = head_above_gold_on_device(tensor, gold, torch.from_numpy(heads).to(device)).cpu().numpy()
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
    reference = rank_cosine(query_vectors, entity_vectors, queries, k=5)
    ours = rank_cosine_on_device(query_vectors, entity_vectors, queries, device, k=5, chunk_size=chunk_size)
    _assert_same_ranks(ours.ranks, reference.ranks)
    np.testing.assert_array_equal(ours.top, reference.top)
    np.testing.assert_array_equal(ours.head_above_gold, reference.head_above_gold)
    assert ours.top.dtype == np.int64 and ours.top.shape == (len(queries), 5)


def test_no_queries_give_empty_results(tiny_kg_dir):
    queries = _queries(tiny_kg_dir, False)
    none = dataclasses.replace(queries, triples=queries.triples[:0], gold=queries.gold[:0], filter_tails=[])
    ranking = rank_cosine_on_device(np.zeros((0, 4), np.float32), np.ones((len(queries.candidates), 4), np.float32), none, "cpu")
    assert ranking.top.shape == (0, 10) and len(ranking.ranks.raw) == 0 and len(ranking.head_above_gold) == 0
