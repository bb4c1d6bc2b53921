"""The streamed cosine kernel equals the whole-matrix kernel: ranks (raw, filtered, optimistic and
pessimistic), top k and head flags, for every block size, with ties, filters, excluded heads and
invalid vectors."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from deer.platform.cosine_ranking import rank_cosine, rank_cosine_blocks
from deer.platform.ranking import Ranking, rank_chunk, top_width
from tests.conftest import _queries


class _Queries:
    """What the rank kernels read of a QuerySet."""

    def __init__(self, gold, filters, heads, exclude_head):
        self.gold, self.filter_tails, self.heads, self.exclude_head = np.asarray(gold), filters, np.asarray(heads), exclude_head

    def head_positions(self):
        return self.heads

    def excluded_positions(self):
        if not self.exclude_head:
            return np.full(len(self.gold), -1)
        return np.where(self.heads == self.gold, -1, self.heads)


def _unit_lattice(rng, n, dim) -> np.ndarray:
    """Unit vectors of 1, 4 or 16 entries of +-1, +-1/2 or +-1/4: every norm is exactly 1 and every cosine an exact
    multiple of 1/64 in float32, whatever the summation order, so a tie is a tie in every block shape."""
    vectors = np.zeros((n, dim), dtype=np.float32)
    for row, count in zip(vectors, rng.choice([1, 4, 16], size=n), strict=True):
        row[rng.choice(dim, size=count, replace=False)] = rng.choice([-1.0, 1.0], size=count) / np.sqrt(count)
    return vectors


def _problem(seed, n_queries=37, n_candidates=211, dim=24, exclude_head=False, invalid=False, lattice=True):
    """Queries, candidates and filters with ties, filters and heads in every role.  ``lattice``: vectors whose cosines
    are exact (``_unit_lattice``), with ten exact copies of candidate 7; otherwise normal float vectors and no copies:
    cosines equal in exact arithmetic may be computed equal in one matrix shape and a rounding apart in another, so
    an exact tie of float vectors is the kernel's documented limit (seen at candidate blocks of 7 and query blocks
    of 5 on one CPU), not an equality to test."""
    rng = np.random.default_rng(seed)
    draw = (lambda n: _unit_lattice(rng, n, dim)) if lattice else (lambda n: rng.normal(size=(n, dim)).astype(np.float32))
    entities = draw(n_candidates)
    if lattice:
        entities[50:60] = entities[7]  # exact duplicates: ties with the gold and inside the top k
    queries = draw(n_queries)
    queries[3] = entities[7]  # a query whose gold ties with ten others at the top (lattice)
    gold = rng.integers(0, n_candidates, size=n_queries)
    gold[3], gold[4], gold[5] = 7, 55, 120
    heads = rng.integers(-1, n_candidates, size=n_queries)
    heads[5] = 120  # head == gold: never excluded
    filters = []
    for i, g in enumerate(gold):
        others = rng.choice(n_candidates, size=rng.integers(0, 8), replace=False)
        if i == 4:
            others = np.arange(50, 60)
        filters.append(np.sort(others[others != g]))
    filters[6] = np.array([p for p in (20, 30) if p != gold[6]])
    heads[6] = filters[6][0]  # an excluded head that is also a known-true tail
    if invalid:
        queries[8] = np.nan  # every score invalid: the worst rank
        entities[gold[9]] = np.nan  # an invalid gold vector
        entities[100] = np.inf
    return queries, entities, _Queries(gold, filters, heads, exclude_head)


def _whole_matrix(vectors, entities, queries, k=10) -> Ranking:
    """The plain path: every cosine in one matrix, ranked by the one kernel (``rank_chunk``)."""
    scores = torch.nn.functional.normalize(torch.from_numpy(vectors), dim=1) @ \
        torch.nn.functional.normalize(torch.from_numpy(entities), dim=1).T
    as_tensor = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int64)  # noqa: E731
    excluded = queries.excluded_positions()
    width = top_width(k, len(entities), excluded)
    ranks, top, above = rank_chunk(scores, as_tensor(queries.gold), queries.filter_tails, as_tensor(excluded),
                                   as_tensor(queries.head_positions()), width)
    return Ranking(ranks, top, above)


def _blocks(entities, size):
    return [(start, entities[start:start + size]) for start in range(0, len(entities), size)]


@pytest.mark.parametrize("lattice", [True, False])
@pytest.mark.parametrize("exclude_head", [False, True])
@pytest.mark.parametrize("invalid", [False, True])
@pytest.mark.parametrize("block, query_block", [(211, 4096), (1, 4096), (7, 5), (64, 1), (100, 37), (210, 16)])
def test_streamed_ranks_equal_the_whole_matrix_kernel(block, query_block, exclude_head, invalid, lattice):
    vectors, entities, queries = _problem(0, exclude_head=exclude_head, invalid=invalid, lattice=lattice)
    expected = _whole_matrix(vectors, entities, queries)
    got = rank_cosine_blocks(vectors, entities[queries.gold], _blocks(entities, block), len(entities), queries, k=10,
                             query_block=query_block)
    for field in ("raw_optimistic", "raw_pessimistic", "filtered_optimistic", "filtered_pessimistic"):
        assert np.array_equal(getattr(got.ranks, field), getattr(expected.ranks, field)), field
    assert np.array_equal(got.top, expected.top)
    assert np.array_equal(got.head_above_gold, expected.head_above_gold)
    if lattice:
        assert got.ranks.raw_pessimistic[3] - got.ranks.raw_optimistic[3] >= 10  # the ties were there to be counted
    through_the_entry = rank_cosine(vectors, entities, queries, k=10, chunk_size=query_block)
    assert np.array_equal(through_the_entry.ranks.filtered, expected.ranks.filtered)
    assert np.array_equal(through_the_entry.top, expected.top)


def test_no_queries_and_fewer_candidates_than_k():
    rng = np.random.default_rng(1)
    vectors, entities = rng.normal(size=(6, 24)).astype(np.float32), rng.normal(size=(5, 24)).astype(np.float32)
    gold = np.array([0, 1, 2, 3, 4, 1])
    queries = _Queries(gold, [np.zeros(0, np.int64)] * 5 + [np.array([0, 4])], rng.integers(0, 5, 6), True)
    expected = _whole_matrix(vectors, entities, queries)
    got = rank_cosine_blocks(vectors, entities[queries.gold], _blocks(entities, 2), len(entities), queries, k=10)
    assert np.array_equal(got.top, expected.top) and got.top.shape == (6, 5)  # query 4's head is its gold: all 5
    assert (got.top[:, 4] == -1).sum() == 5 and sorted(got.top[4]) == [0, 1, 2, 3, 4]  # the others rank 4, then -1
    assert np.array_equal(got.ranks.filtered, expected.ranks.filtered)
    empty = _Queries(np.zeros(0, np.int64), [], np.zeros(0, np.int64), False)
    none = rank_cosine_blocks(np.zeros((0, 24), np.float32), np.zeros((0, 24), np.float32), _blocks(entities, 2), 5, empty)
    assert none.top.shape == (0, 5) and len(none.ranks.raw) == 0


@pytest.mark.parametrize("exclude_head", [False, True])
def test_blocks_of_any_positions_in_any_order_rank_alike(exclude_head):
    """Blocks as a store holds them (each a set of candidate positions, in the order its shards were
    written) give the ranks, ties and top k of the whole matrix."""
    vectors, entities, queries = _problem(2, exclude_head=exclude_head, invalid=True)
    rng = np.random.default_rng(5)
    groups = np.array_split(rng.permutation(len(entities)), 9)
    blocks = [(np.sort(group), entities[np.sort(group)]) for group in groups]
    expected = _whole_matrix(vectors, entities, queries)
    got = rank_cosine_blocks(vectors, entities[queries.gold], blocks, len(entities), queries, k=10, query_block=16)
    for field in ("raw_optimistic", "raw_pessimistic", "filtered_optimistic", "filtered_pessimistic"):
        assert np.array_equal(getattr(got.ranks, field), getattr(expected.ranks, field)), field
    assert np.array_equal(got.top, expected.top) and np.array_equal(got.head_above_gold, expected.head_above_gold)


def test_a_gold_estimate_outside_the_band_is_ranked_again_exactly():
    """The row-wise estimate only places the near-tie band: a gold whose exact score falls outside it (here
    forced by perturbing the gold vectors) is ranked again with the wide band, and the ranks stay exact."""
    vectors, entities, queries = _problem(3, exclude_head=True, lattice=False)  # the band, not ties, under test
    off = entities[queries.gold] + np.random.default_rng(4).normal(scale=1e-3, size=(len(queries.gold), entities.shape[1]))
    expected = _whole_matrix(vectors, entities, queries)
    got = rank_cosine_blocks(vectors, off.astype(np.float32), _blocks(entities, 50), len(entities), queries, k=10, band=1e-7)
    for field in ("raw_optimistic", "raw_pessimistic", "filtered_optimistic", "filtered_pessimistic"):
        assert np.array_equal(getattr(got.ranks, field), getattr(expected.ranks, field)), field
    assert np.array_equal(got.top, expected.top) and np.array_equal(got.head_above_gold, expected.head_above_gold)


@pytest.mark.parametrize("exclude_head", [False, True])
@pytest.mark.parametrize("n_candidates", [2, 5, 10])
def test_top_lists_every_candidate_when_there_are_at_most_k(n_candidates, exclude_head):
    """With k or fewer candidates the streamed top lists all of them (less the excluded head), as
    ``rank_scores`` does on the same cosine matrix: none lost at the end of the list."""
    from deer.platform.ranking import rank_scores
    rng = np.random.default_rng(n_candidates)
    vectors, entities = rng.normal(size=(4, 8)).astype(np.float32), rng.normal(size=(n_candidates, 8)).astype(np.float32)
    gold = rng.integers(0, n_candidates, 4)
    heads = (gold + 1) % n_candidates
    queries = _Queries(gold, [np.zeros(0, np.int64)] * 4, heads, exclude_head)
    scores = (torch.nn.functional.normalize(torch.from_numpy(vectors), dim=1)
              @ torch.nn.functional.normalize(torch.from_numpy(entities), dim=1).T).double().numpy()
    expected = rank_scores(scores, queries, k=10)
    for block in (1, 3, n_candidates):
        got = rank_cosine_blocks(vectors, entities[gold], _blocks(entities, block), n_candidates, queries, k=10)
        assert got.top.shape == (4, n_candidates - exclude_head)
        assert np.array_equal(got.top, expected.top), block


def test_candidates_with_the_gold_vector_tie_it_in_any_column_and_block():
    """Entities of the same name and description have one prompt, so one vector: each ties the gold.  A float32 matrix
    product rounded such copies differently by column (1e-8 apart at 6 candidates of 32 dimensions, on a CPU), so the
    gold ranked above or below its copies by where they stood (raw rank 4 or 5.5 for the tie's 5).  Checked against the
    rank rule (``ranking_oracle.rank_of``) on per-pair, correctly rounded cosines, where copies are equal."""
    import math

    from tests.ranking_oracle import rank_of

    rng = np.random.default_rng(0)
    for trial in range(40):
        n, dim = int(rng.integers(4, 13)), int(rng.choice([6, 32]))
        base = rng.normal(size=(3, dim)).astype(np.float32)
        entities = rng.normal(size=(n, dim)).astype(np.float32)
        copies = np.sort(rng.choice(n, size=3, replace=False))
        entities[copies] = base[0]  # three entities of one prompt
        gold = np.concatenate([copies, rng.integers(0, n, 2)])
        heads = np.roll(copies, 1).tolist() + [-1, -1]  # a head that is a copy of the gold: never above it
        queries = _Queries(gold, [np.zeros(0, np.int64)] * len(gold), heads, False)
        vectors = rng.normal(size=(len(gold), dim)).astype(np.float32)
        unit = lambda a: a.astype(np.float64) / np.linalg.norm(a.astype(np.float64), axis=1, keepdims=True)  # noqa: E731
        scores = np.array([[math.fsum(q * e) for e in unit(entities)] for q in unit(vectors)])
        expected = [rank_of(row, g) for row, g in zip(scores, gold, strict=True)]
        for got in [rank_cosine(vectors, entities, queries, k=3)] + [
                rank_cosine_blocks(vectors, entities[gold], _blocks(entities, size), n, queries, k=3) for size in (1, 2, 5)]:
            assert got.ranks.raw.tolist() == expected, trial
            assert not got.head_above_gold[:3].any(), trial


@pytest.mark.parametrize("n_candidates", [2, 5, 10, 12])
def test_each_query_lists_every_candidate_it_ranks(n_candidates):
    """With exclude_head, a query whose head is its gold (a self-loop) excludes nothing and ranks every candidate, the
    others one fewer.  The kernels gave every query one width, min(k, candidates - 1), so with at most k candidates the
    self-loop's list left out its last candidate (the gold, where it ranked last).  Each list now holds every candidate
    its query ranks, best first as ``plain_top_k`` orders them, a shorter one padded with -1 at the end; the gold
    stands at its optimistic rank (no ties here)."""
    from deer.platform.ranking import rank_scores
    from tests.ranking_oracle import plain_top_k

    rng = np.random.default_rng(n_candidates)
    vectors, entities = rng.normal(size=(6, 8)).astype(np.float32), rng.normal(size=(n_candidates, 8)).astype(np.float32)
    gold = rng.integers(0, n_candidates, 6)
    heads = np.where(np.arange(6) < 2, gold, (gold + 1) % n_candidates)  # queries 0 and 1: self-loops
    queries = _Queries(gold, [np.zeros(0, np.int64)] * 6, heads, True)
    scores = (torch.nn.functional.normalize(torch.from_numpy(vectors), dim=1)
              @ torch.nn.functional.normalize(torch.from_numpy(entities), dim=1).T).double().numpy()
    expected = [plain_top_k(row, 10, e) for row, e in zip(scores, queries.excluded_positions(), strict=True)]
    for got in (rank_scores(scores, queries, k=10), rank_scores(scores, queries, k=10, chunk_size=1),
                rank_cosine(vectors, entities, queries, k=10),
                rank_cosine_blocks(vectors, entities[gold], _blocks(entities, 3), n_candidates, queries, k=10, query_block=1)):
        assert got.top.shape == (6, min(10, n_candidates))
        listed = [[c for c in row if c >= 0] for row in got.top.tolist()]
        assert listed == expected
        assert all(-1 not in row[:len(entries)] for row, entries in zip(got.top.tolist(), listed, strict=True))
        for row, g, rank in zip(listed, gold, got.ranks.raw_optimistic, strict=True):
            assert rank > len(row) or row[int(rank) - 1] == g


@pytest.mark.parametrize("extra", [-1, 5])
def test_candidate_vectors_of_another_count_are_refused(tiny_kg_dir, extra):
    queries = _queries(tiny_kg_dir)
    n = len(queries.candidates)
    rng = np.random.default_rng(1)
    query_vectors, vectors = rng.normal(size=(len(queries), 8)), rng.normal(size=(n + extra, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=rf"{n + extra} candidate vectors.*{n} candidates"):
        rank_cosine(query_vectors, vectors, queries)
    gold_vectors = rng.normal(size=(len(queries), 8))
    with pytest.raises(ValueError, match=rf"{n + extra} candidates.*{n} candidates"):
        rank_cosine_blocks(query_vectors, gold_vectors, [(0, vectors)], n + extra, queries)


def test_streamed_blocks_that_do_not_cover_the_candidates_are_refused(tiny_kg_dir):
    """Blocks are checked as they arrive: a position past the candidates at once, a count short of them after the pass."""
    queries = _queries(tiny_kg_dir)
    n = len(queries.candidates)
    rng = np.random.default_rng(2)
    query_vectors, vectors = rng.normal(size=(len(queries), 8)), rng.normal(size=(n + 3, 8)).astype(np.float32)
    gold_vectors = vectors[queries.gold]
    with pytest.raises(ValueError, match=rf"candidate position {n}.*{n} candidates"):
        rank_cosine_blocks(query_vectors, gold_vectors, [(0, vectors[:5]), (5, vectors[5:])], n, queries)
    with pytest.raises(ValueError, match=rf"{n - 2} candidate vectors.*{n} candidates"):
        rank_cosine_blocks(query_vectors, gold_vectors, [(0, vectors[:n - 2])], n, queries)
    with pytest.raises(ValueError, match=rf"{len(queries) - 1} query vectors.*{len(queries)} queries"):
        rank_cosine_blocks(query_vectors[1:], gold_vectors, [(0, vectors[:n])], n, queries)
    assert len(rank_cosine_blocks(query_vectors, gold_vectors, [(0, vectors[:n])], n, queries).ranks.raw) == len(queries)


@pytest.mark.parametrize("blocks", [
    lambda n: [(np.r_[3, 0, 1, 2, 4:n], None)],  # positions out of order: the gold's column looked up in the wrong place
    lambda n: [(np.r_[0, 0, 2:n], None)],  # candidate 0 twice, candidate 1 never: the count is right
    lambda n: [(np.arange(0, 3), None), (np.arange(2, n - 1), None)],  # candidate 2 in two blocks, the last in none
])
def test_blocks_that_repeat_a_candidate_or_list_it_out_of_order_are_refused(tiny_kg_dir, blocks):
    """Audit s11-C: blocks of the right total count but a repeated or unordered position were ranked (wrong ranks, no
    error), though the blocks "must hold each candidate once", in ascending positions."""
    queries = _queries(tiny_kg_dir)
    n = len(queries.candidates)
    rng = np.random.default_rng(3)
    query_vectors, vectors = rng.normal(size=(len(queries), 8)), rng.normal(size=(n, 8)).astype(np.float32)
    given = [(where, vectors[where]) for where, _ in blocks(n)]
    with pytest.raises(ValueError, match="each candidate once"):
        rank_cosine_blocks(query_vectors, vectors[queries.gold], given, n, queries)


def test_cosine_ranking_takes_ranks_and_top_k_from_one_score_chunk(monkeypatch):
    """Bug 6: the CPU path made the Q x E cosine matrix twice (numpy for ranks, FAISS again for the top
    10), so near ties could disagree; now one chunk gives both, and FAISS is not called at all."""
    monkeypatch.setitem(sys.modules, "faiss", None)  # importing faiss now raises
    rng = np.random.default_rng(0)
    n_queries, n_entities = 30, 50
    queries = type("Q", (), {"gold": rng.integers(0, n_entities, n_queries),
                             "filter_tails": np.array([np.array([], dtype=np.int64)] * n_queries, dtype=object),
                             "excluded_positions": lambda self: np.full(n_queries, -1),
                             "head_positions": lambda self: np.full(n_queries, -1)})()
    entities = rng.normal(size=(n_entities, 8)).astype(np.float32)
    entities[1::2] = entities[::2] * (1 + 1e-7)  # exact-arithmetic ties, broken (or not) by rounding
    ranking = rank_cosine(rng.normal(size=(n_queries, 8)).astype(np.float32), entities, queries, k=10, chunk_size=7)
    ranks = ranking.ranks
    for gold, optimistic, pessimistic, top in zip(queries.gold, ranks.raw_optimistic, ranks.raw_pessimistic, ranking.top, strict=True):
        if gold in top:  # listed where its rank says: after every candidate above it, among its ties
            assert optimistic <= list(top).index(gold) + 1 <= pessimistic
        else:  # ten candidates at least as good
            assert pessimistic > len(top)
