"""A score row, score matrix or set of candidate vectors of another width than the candidates it is
ranked among is refused (ValueError naming the probe or query and both sizes), never ranked against the
wrong count."""

from __future__ import annotations

import numpy as np
import pytest

from deer.platform.benchmark_rows import ranks_from_scores
from deer.platform.cosine_ranking import rank_cosine, rank_cosine_blocks
from deer.platform.ranking import rank_scores
from kg_data.load import load_kg
from kg_data.queries import build_queries
from kg_data.task import CandidateSet, ClozeQuery, Task


def _task():
    query = ClozeQuery("S", "r", "f", 0, "template", 0, "[X] [Y]", "x", "b", "set", 1)
    return Task("t", [query, query], {"set": CandidateSet(["a", "b", "c", "d"])}, {}, locate=lambda q: "facts.jsonl:7")


@pytest.mark.parametrize("width", [3, 6])
def test_a_cloze_row_of_another_width_than_its_candidate_set_is_refused(width):
    scores = {0: np.array([0.1, 0.9, 0.5, 0.2]), 1: np.linspace(0, 1, width)}
    with pytest.raises(ValueError, match=rf"probe 'p'.*query 1.*facts.jsonl:7.*{width} scores.*4 candidates"):
        ranks_from_scores(_task(), scores, "p")
    assert ranks_from_scores(_task(), {0: scores[0]}, "p")["p_rank"].tolist()[0] == 1.0  # the right width: ranked


def _queries(tiny_kg_dir):
    return build_queries(load_kg(tiny_kg_dir), "test")


@pytest.mark.parametrize("extra", [-1, 2])
def test_a_kg_score_matrix_of_another_width_is_refused(tiny_kg_dir, extra):
    queries = _queries(tiny_kg_dir)
    n = len(queries.candidates)
    with pytest.raises(ValueError, match=rf"{n + extra} columns.*{n} candidates"):
        rank_scores(np.zeros((len(queries), n + extra)), queries)
    with pytest.raises(ValueError, match=rf"{len(queries) + 1} rows.*{len(queries)} queries"):
        rank_scores(np.zeros((len(queries) + 1, n)), queries)
    assert len(rank_scores(np.zeros((len(queries), n)), queries).ranks.raw) == len(queries)


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
