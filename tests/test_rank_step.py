"""The one rank step (deer/platform/rank_step.py): a probe's scores or vectors over a task -> each query's ranks, top
candidates and gold score.  Each way it takes equals the plain rule (``tests.ranking_oracle``) on the same numbers:
score rows in chunks or one at a time, a small set's distinct vectors as its cosine rows, a streamed set's vectors
by the streamed cosine, the known answers filtering."""

from __future__ import annotations

import types

import numpy as np
import pytest

from deer.base.vectors import normalize_rows
from deer.platform.rank_step import DistinctVectors, rank_task
from kg_data.queries import FilterTails
from kg_data.task import CandidateSet, ClozeQuery, KnownAnswers, Task
from tests.ranking_oracle import plain_top_k, rank_of


def one_set_task(n_queries: int, n_candidates: int, rng, streamed: bool = False, known: bool = True) -> Task:
    """Queries over one shared set; with ``known``, each query's other true tails (never its gold) and an excluded one."""
    gold = rng.integers(0, n_candidates, n_queries)
    queries = [ClozeQuery("s", "r", f"f{i}", i, "template", 0, "[X] is [Y].", "x", "y", "set", int(g)) for i, g in enumerate(gold)]
    candidates = CandidateSet(tuple(f"c{j}" for j in range(n_candidates)), streamed=streamed)
    answers = None
    if known:
        filters = [np.setdiff1d(rng.choice(n_candidates, 3, replace=False), [g]) for g in gold]
        excluded = np.array([-1 if i % 3 else (g + 1) % n_candidates for i, g in enumerate(gold)], dtype=np.int64)
        filters = [np.setdiff1d(f, [x]) if x >= 0 else f for f, x in zip(filters, excluded, strict=True)]
        heads = rng.integers(-1, n_candidates, n_queries)
        answers = KnownAnswers(gold.astype(np.int64), FilterTails.of(filters), excluded, heads.astype(np.int64), n_candidates)
    return Task("t", queries, {"set": candidates}, {}, known=answers)


def plain_ranks(task: Task, matrix: np.ndarray) -> tuple[list[float], list[float], list[list[int]]]:
    """Raw and filtered realistic ranks and the top 10 of each row, by the plain rule (an excluded candidate no competitor)."""
    raw, filtered, top = [], [], []
    for i, row in enumerate(matrix):
        known = task.known
        excluded = -1 if known is None else int(known.excluded[i])
        row = row.copy()
        if excluded >= 0:
            row[excluded] = np.nan  # never ahead of the gold
        others = np.zeros(0, np.int64) if known is None else known.filter_tails[i]
        raw.append(rank_of(row, task.queries[i].gold))
        filtered.append(rank_of(row, task.queries[i].gold, others))
        top.append(plain_top_k(matrix[i], 10, excluded))
    return raw, filtered, top


@pytest.mark.parametrize("chunk_rows", [None, 1, 4])
def test_score_rows_rank_as_the_plain_rule_in_any_chunks(chunk_rows):
    """Score rows with ties and invalid values, the task's known answers filtering: every chunking ranks as the plain
    rule, and the gold's score is the row's."""
    rng = np.random.default_rng(0)
    task = one_set_task(11, 7, rng)
    matrix = np.round(rng.random((11, 7)), 1)
    matrix[2, task.queries[2].gold] = np.nan
    matrix[5, 0] = -np.inf
    ranking = rank_task(task, types.SimpleNamespace(scores=dict(enumerate(matrix))), "p", chunk_rows=chunk_rows)
    raw, filtered, top = plain_ranks(task, matrix)
    np.testing.assert_array_equal(ranking.ranks.raw, raw)
    np.testing.assert_array_equal(ranking.ranks.filtered, filtered)
    assert [[p for p in row if p >= 0] for row in ranking.top.tolist()] == top
    np.testing.assert_array_equal(ranking.gold_scores, [matrix[i, q.gold] for i, q in enumerate(task.queries)])
    assert ranking.ranked.all()


def test_a_query_left_out_is_not_ranked_and_a_row_of_another_width_is_refused():
    rng = np.random.default_rng(1)
    task = one_set_task(4, 5, rng, known=False)
    scores = {0: rng.random(5), 3: rng.random(5)}
    ranking = rank_task(task, types.SimpleNamespace(scores=scores), "p")
    assert ranking.ranked.tolist() == [True, False, False, True] and np.isnan(ranking.ranks.raw[[1, 2]]).all()
    assert (ranking.top[[1, 2]] == -1).all()
    with pytest.raises(ValueError, match=r"probe 'p', query 1 .*4 scores for the 5 candidates of its set 'set'"):
        rank_task(task, types.SimpleNamespace(scores={1: rng.random(4)}), "p")


def test_a_small_sets_distinct_vectors_rank_as_their_cosine_rows():
    """DEER's vectors of a small set: one per distinct prompt, two candidates sharing one tie exactly."""
    rng = np.random.default_rng(2)
    task = one_set_task(6, 5, rng, known=False)
    queries, distinct = rng.normal(size=(6, 8)).astype(np.float32), normalize_rows(rng.normal(size=(4, 8)).astype(np.float32))
    inverse = np.array([0, 1, 2, 1, 3])  # candidates 1 and 3 share a prompt
    ranking = rank_task(task, types.SimpleNamespace(scores=None, query_vectors=queries,
                                                   candidate_vectors={"set": DistinctVectors(distinct, inverse)}))
    matrix = (normalize_rows(queries) @ distinct.T)[:, inverse].astype(np.float64)
    raw, _, top = plain_ranks(task, matrix)
    np.testing.assert_array_equal(ranking.ranks.raw, raw)
    assert [[p for p in row if p >= 0] for row in ranking.top.tolist()] == top
    assert all(matrix[i, 1] == matrix[i, 3] for i in range(6))


def test_a_streamed_sets_vectors_rank_by_the_streamed_cosine_as_their_score_rows():
    """A streamed set's vectors (never made a score matrix) rank as the same cosines given as score rows, with the
    known answers filtering and the head counted where it outranks the gold (vectors apart: no near-ties)."""
    rng = np.random.default_rng(3)
    task = one_set_task(9, 40, rng, streamed=True)
    queries, candidates = rng.normal(size=(9, 16)).astype(np.float32), rng.normal(size=(40, 16)).astype(np.float32)
    streamed = rank_task(task, types.SimpleNamespace(scores=None, query_vectors=queries, candidate_vectors={"set": candidates}))
    matrix = (normalize_rows(queries) @ normalize_rows(candidates).T).astype(np.float64)
    rows = rank_task(task, types.SimpleNamespace(scores=dict(enumerate(matrix))))
    for field in ("raw", "filtered"):
        np.testing.assert_array_equal(getattr(streamed.ranks, field), getattr(rows.ranks, field))
    np.testing.assert_array_equal(streamed.top, rows.top)
    np.testing.assert_array_equal(streamed.head_above_gold, rows.head_above_gold)
    assert streamed.ranked.all() and np.isnan(streamed.gold_scores).all()  # the streamed cosine keeps no score


def test_a_score_matrix_or_one_array_of_vectors_is_refused_naming_the_probe():
    """Every probe answers in one shape: {query index: scores} or {set name: vectors} (a KG's matrix, taken before
    0.2, would be read row by row as a dict is)."""
    task = one_set_task(3, 4, np.random.default_rng(4), known=False)
    with pytest.raises(TypeError, match=r"probe 'old' returned ndarray; a probe returns \{query index: scores"):
        rank_task(task, types.SimpleNamespace(scores=np.zeros((3, 4))), "old")
    with pytest.raises(TypeError, match=r"probe 'old' returned ndarray; a probe returns \{candidate set name"):
        rank_task(task, types.SimpleNamespace(scores=None, query_vectors=np.ones((3, 2)), candidate_vectors=np.ones((4, 2))), "old")
