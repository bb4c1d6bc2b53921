"""Shared ranking: exact ranks vs plain loops, FAISS vs numpy, filtering, ties, metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deer.base.vectors import normalize_rows
from deer.platform.cosine_ranking import rank_cosine
from deer.platform.metrics import adjusted_index, grouped_metrics, random_baseline, rank_metrics
from deer.platform.ranking import GoldRanks, _no_positions, _top_k, candidate_counts, rank_chunk, rank_scores
from tests.conftest import _queries
from tests.ranking_oracle import rank_of


def gold_ranks_from_scores(scores: np.ndarray, gold: np.ndarray, filter_tails, excluded=None) -> GoldRanks:
    """Exact ranks of ``gold[i]`` in row i of ``scores`` (n_queries, n_candidates): the kernel's, one chunk."""
    scores = torch.from_numpy(np.asarray(scores, dtype=np.float64))
    excluded = None if excluded is None else torch.as_tensor(np.asarray(excluded), dtype=torch.int64)
    return rank_chunk(scores, torch.as_tensor(np.asarray(gold), dtype=torch.int64), filter_tails, excluded, k=0)[0]


def top_k_from_scores(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best candidates per row, best first (invalid scores last, ties by position): the kernel's."""
    cleaned = torch.from_numpy(np.asarray(scores, dtype=np.float64)).clone()
    cleaned[~torch.isfinite(cleaned)] = float("-inf")
    return _top_k(cleaned, min(k, cleaned.shape[1]), _no_positions(len(cleaned), "cpu"))

def _random_problem(seed, n_queries=40, n_candidates=300, dim=16):
    rng = np.random.default_rng(seed)
    queries = rng.normal(size=(n_queries, dim)).astype(np.float32)
    entities = rng.normal(size=(n_candidates, dim)).astype(np.float32)
    gold = rng.integers(0, n_candidates, size=n_queries)
    filters = []
    for g in gold:
        others = rng.choice(n_candidates, size=rng.integers(0, 6), replace=False)
        filters.append(np.sort(others[others != g]))
    return queries, entities, gold, filters


class _Queries:
    """What the rank kernel reads of a QuerySet: gold, filtered tails, no head."""

    def __init__(self, gold, filters):
        self.gold, self.filter_tails = np.asarray(gold), np.asarray(filters, dtype=object)

    def excluded_positions(self):
        return np.full(len(self.gold), -1)

    head_positions = excluded_positions


def test_cosine_ranks_equal_plain_numpy_sort():
    queries, entities, gold, filters = _random_problem(0)
    ranks = rank_cosine(queries, entities, _Queries(gold, filters), chunk_size=7).ranks
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    e = entities / np.linalg.norm(entities, axis=1, keepdims=True)
    scores = q @ e.T
    for i in range(len(queries)):
        order = np.argsort(-scores[i], kind="stable")
        assert ranks.raw[i] == np.where(order == gold[i])[0][0] + 1  # no ties in random floats
        assert ranks.filtered[i] == rank_of(scores[i], gold[i], filters[i])


def test_cosine_top_k_equals_numpy_ranking():
    queries, entities, gold, filters = _random_problem(1)
    top = rank_cosine(queries, entities, _Queries(gold, filters), k=10, chunk_size=7).top
    plain = normalize_rows(queries) @ normalize_rows(entities).T
    expected = np.argsort(-plain, axis=1, kind="stable")[:, :10]
    assert np.array_equal(top, expected)


def test_filtered_rank_equals_brute_force_removal():
    _, _, gold, filters = _random_problem(2)
    rng = np.random.default_rng(2)
    scores = rng.integers(0, 20, size=(len(gold), 300)).astype(np.float64)  # many ties
    ranks = gold_ranks_from_scores(scores, gold, filters)
    for i in range(len(gold)):
        keep = np.setdiff1d(np.arange(300), filters[i])
        kept_scores = scores[i, keep]
        g = scores[i, gold[i]]
        assert ranks.filtered_optimistic[i] == 1 + np.sum(kept_scores > g)
        assert ranks.filtered_pessimistic[i] == np.sum(kept_scores >= g)
        assert ranks.raw_optimistic[i] == 1 + np.sum(scores[i] > g)
        assert ranks.filtered[i] == rank_of(scores[i], gold[i], filters[i])


def test_ties_give_optimistic_pessimistic_realistic():
    scores = np.array([[0.5, 0.9, 0.5, 0.5, 0.1]])
    ranks = gold_ranks_from_scores(scores, np.array([0]), [np.array([2])])
    assert ranks.raw_optimistic[0] == 2 and ranks.raw_pessimistic[0] == 4 and ranks.raw[0] == 3
    assert ranks.filtered_optimistic[0] == 2 and ranks.filtered_pessimistic[0] == 3 and ranks.filtered[0] == 2.5


def test_non_finite_competitors_never_beat_or_tie_the_gold():
    # NaN and +inf would count as "higher" if compared as numbers (+inf) or as -inf ties (-inf vs -inf).
    scores = np.array([[np.nan, 0.2, 0.1, np.inf, -np.inf, 0.1]])
    ranks = gold_ranks_from_scores(scores, np.array([2]), [np.array([], dtype=int)])
    # Only 0.2 is ahead; the other 0.1 ties: optimistic 2, pessimistic 3.
    assert ranks.raw_optimistic[0] == 2 and ranks.raw_pessimistic[0] == 3 and ranks.raw[0] == 2.5
    assert ranks.raw[0] == rank_of(scores[0], 2)
    # The same rank as with the invalid candidates removed.
    clean = gold_ranks_from_scores(np.array([[0.2, 0.1, 0.1]]), np.array([1]), [np.array([], dtype=int)])
    assert ranks.raw[0] == clean.raw[0]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_gold_gets_the_worst_rank(bad):
    scores = np.array([[0.3, bad, np.nan, -np.inf, 0.9], [0.3, 0.5, 0.1, 0.2, 0.4]])
    gold = np.array([1, 1])
    filters = [np.array([4]), np.array([], dtype=int)]
    ranks = gold_ranks_from_scores(scores, gold, filters)
    # Behind all 5 candidates raw, all 4 left after filtering -- even behind other invalid scores.
    assert ranks.raw_optimistic[0] == ranks.raw_pessimistic[0] == 5
    assert ranks.filtered_optimistic[0] == ranks.filtered_pessimistic[0] == 4
    assert ranks.filtered[0] == rank_of(scores[0], 1, filters[0]) == 4
    assert ranks.raw[1] == 1  # other rows unaffected


def test_random_invalid_scores_match_the_plain_reference():
    _, _, gold, filters = _random_problem(3, n_candidates=50)
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 8, size=(len(gold), 50)).astype(np.float64)
    scores[rng.random(scores.shape) < 0.15] = np.nan
    scores[rng.random(scores.shape) < 0.05] = np.inf
    scores[rng.random(scores.shape) < 0.05] = -np.inf
    ranks = gold_ranks_from_scores(scores, gold, filters)
    for i in range(len(gold)):
        assert ranks.filtered[i] == rank_of(scores[i], gold[i], filters[i])
        assert ranks.raw[i] == rank_of(scores[i], gold[i])
    assert np.all(ranks.filtered_optimistic <= ranks.filtered_pessimistic)


def test_top_k_puts_invalid_scores_last():
    scores = np.array([[np.nan, 0.2, np.inf, 0.5, -np.inf]])
    assert top_k_from_scores(scores, 3)[0, :2].tolist() == [3, 1]


def test_top_k_from_scores_best_first():
    scores = np.array([[0.1, 0.7, 0.3, 0.9], [4.0, 3.0, 2.0, 1.0]])
    assert top_k_from_scores(scores, 3).tolist() == [[3, 1, 2], [0, 1, 2]]


def test_metrics_hand_computed():
    metrics = rank_metrics(np.array([1, 2, 4, 20, 200]), ks=(1, 3, 10, 100))
    assert metrics["hit@1"] == pytest.approx(0.2)
    assert metrics["hit@3"] == pytest.approx(0.4)
    assert metrics["hit@10"] == pytest.approx(0.6)
    assert metrics["hit@100"] == pytest.approx(0.8)
    assert metrics["mrr"] == pytest.approx((1 + 0.5 + 0.25 + 0.05 + 0.005) / 5)
    assert metrics["mr"] == pytest.approx(227 / 5)
    assert metrics["hit@1_se"] == pytest.approx(np.std([1, 0, 0, 0, 0], ddof=1) / np.sqrt(5))


def test_random_baseline_matches_simulation():
    counts = np.array([10.0, 100.0])
    baseline = random_baseline(counts, ks=(1, 10))
    assert baseline["hit@1"] == pytest.approx((0.1 + 0.01) / 2)
    assert baseline["hit@10"] == pytest.approx((1.0 + 0.1) / 2)
    assert baseline["mr"] == pytest.approx((5.5 + 50.5) / 2)
    harmonic = lambda n: sum(1 / k for k in range(1, n + 1))  # noqa: E731
    assert baseline["mrr"] == pytest.approx((harmonic(10) / 10 + harmonic(100) / 100) / 2)
    rng = np.random.default_rng(0)
    simulated = np.concatenate([rng.integers(1, 11, 20000), rng.integers(1, 101, 20000)])
    assert rank_metrics(simulated, ks=(10,))["hit@10"] == pytest.approx(baseline["hit@10"], abs=0.01)


def test_the_adjusted_index_is_zero_by_chance_and_one_when_perfect():
    """Issue 22.7: PyKEEN's adjusted index, (value - E) / (1 - E) under random ranking, so runs over 28
    and over 40,943 candidates compare; None where chance already hits (k >= every candidate count)."""
    counts = np.array([10.0, 100.0])
    baseline = random_baseline(counts, ks=(1, 10, 100))
    perfect = adjusted_index(rank_metrics(np.ones(2), ks=(1, 10, 100)), baseline)
    assert perfect["hit@100"] is None and all(perfect[k] == pytest.approx(1.0) for k in ("hit@1", "hit@10", "mrr", "mr"))
    assert adjusted_index(random_baseline(np.array([28.0, 40.0]), ks=(100,)), random_baseline(np.array([28.0, 40.0]), ks=(100,)))["hit@100"] is None
    rng = np.random.default_rng(0)
    simulated = np.concatenate([rng.integers(1, 11, 20000), rng.integers(1, 101, 20000)]).astype(float)
    chance = adjusted_index(rank_metrics(simulated, ks=(1, 10)), random_baseline(np.repeat(counts, 20000), ks=(1, 10)))
    assert all(abs(value) < 0.02 for value in chance.values()), chance
    worst = adjusted_index(rank_metrics(counts, ks=(1,)), random_baseline(counts, ks=(1,)))
    assert worst["mr"] == pytest.approx(1 - (55 - 1) / (28 - 1)) and worst["mr"] < 0  # AMRI: last place is below chance


def test_candidate_counts_and_grouping():
    filters = [np.array([1, 2]), np.array([], dtype=int)]
    assert candidate_counts(10, filters, filtered=True).tolist() == [8, 10]
    grouped = grouped_metrics(np.array([1, 3, 5]), ["b", "a", "b"], ks=(1,))
    assert list(grouped) == ["a", "b"] and grouped["b"]["hit@1"] == 0.5


def test_top_k_never_lists_the_excluded_candidate_when_the_kth_value_is_minus_inf():
    """A query left unscored (all NaN) or with fewer than k valid scores: its top k is filled with
    invalid candidates in position order, never with its excluded one (which is no competitor)."""
    from tests.ranking_oracle import plain_top_k
    rows = [[np.nan] * 4, [np.nan] * 4, [0.3, -np.inf, 0.1, 0.2], [-np.inf, 0.5, np.nan, -np.inf],
            [np.nan, np.nan, 0.4, np.nan], [-np.inf] * 4]
    scores = np.array(rows)
    gold = np.array([1, 2, 0, 1, 2, 3])
    excluded = np.array([0, 3, 1, 3, 0, 2])
    for k in (1, 2, 3):
        _, top, _ = rank_chunk(torch.from_numpy(scores), torch.from_numpy(gold), [()] * len(rows),
                               torch.from_numpy(excluded), k=k)
        for i, row in enumerate(rows):
            assert excluded[i] not in top[i].tolist(), (i, k, top[i])
            assert top[i].tolist() == plain_top_k(np.array(row), k, int(excluded[i])), (i, k)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_an_invalid_gold_never_has_the_head_above_it(bad):
    """A gold without a valid score ranks last, but is no score the head can be 'above': head_above_gold is
    False in the score kernel (whatever the invalid value) and in the cosine kernel (an invalid gold vector)."""
    scores = torch.tensor([[bad, 1.0, 0.5], [0.2, 1.0, 0.5]], dtype=torch.float64)
    ranks, _, above = rank_chunk(scores, torch.tensor([0, 0]), [(), ()], heads=torch.tensor([1, 1]), k=3)
    assert ranks.raw[0] == 3 and above.tolist() == [False, True]
    rng = np.random.default_rng(0)
    entities = rng.normal(size=(3, 4)).astype(np.float32)
    entities[0] = bad
    vectors = np.stack([entities[1], entities[2]])  # row 1: its head (2) above its gold (1)
    cosine = rank_cosine(vectors, entities, _HeadQueries([0, 1], [1, 2]))
    assert cosine.ranks.raw[0] == 3 and cosine.head_above_gold.tolist() == [False, True]


class _HeadQueries(_Queries):
    def __init__(self, gold, heads):
        super().__init__(gold, [np.zeros(0, np.int64)] * len(gold))
        self.heads = np.asarray(heads)

    def head_positions(self):
        return self.heads


@pytest.mark.parametrize("extra", [-1, 2])
def test_a_kg_score_matrix_of_another_width_is_refused(tiny_kg_dir, extra):
    queries = _queries(tiny_kg_dir)
    n = len(queries.candidates)
    with pytest.raises(ValueError, match=rf"{n + extra} columns.*{n} candidates"):
        rank_scores(np.zeros((len(queries), n + extra)), queries)
    with pytest.raises(ValueError, match=rf"{len(queries) + 1} rows.*{len(queries)} queries"):
        rank_scores(np.zeros((len(queries) + 1, n)), queries)
    assert len(rank_scores(np.zeros((len(queries), n)), queries).ranks.raw) == len(queries)
