"""The one rank rule reaches every probe: a failed score is never right (bug 1), and the cosine
ranking makes each score chunk once and takes ranks and top k from it (bug 6)."""

from __future__ import annotations

import sys

import numpy as np

from deer.platform.cosine_ranking import rank_cosine
from kg_data.bear import BearRelation
from tests.bear_tables import score_relation


class _NanForGold:
    """Scores every statement 0.0, except the gold statement of each instance: NaN (a failed score)."""

    def __init__(self, gold_statements):
        self.gold_statements = set(gold_statements)

    def score_statements(self, statements, progress=None):
        return [float("nan") if s in self.gold_statements else 0.0 for s in statements]


def test_a_failed_gold_score_is_never_correct_in_the_bear_data_set():
    """Bug 1: the BEAR data-set rank rule gave a NaN gold score rank 0.5 and np.argmax picked the NaN,
    so a failed score counted as a correct answer."""
    relation = BearRelation(code="P1", templates=["[X] is in [Y]."], answer_ids=["a", "b", "c"], answer_labels=["A", "B", "C"],
                            subject_ids=["s", "t"], subject_labels=["S", "T"], gold=np.array([0, 2]), rows=np.array([0, 1]),
                            domains=[], cardinality="N:1", total_instances=2)
    gold_statements = ["S is in A.", "T is in C."]
    table = score_relation(_NanForGold(gold_statements), relation)
    assert not table["correct"].any()
    assert table["rank"].tolist() == [3.0, 3.0]  # behind both competitors
    assert table["predicted_id"].tolist() == ["b", "a"]  # the first of the highest valid scores


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


def test_benchmark_rows_ranked_in_chunks_equal_one_query_at_a_time():
    """deer.platform.benchmark_rows ranks rows of one width together; one query per kernel call (chunk_rows=1)
    gives the same table, with ties, NaN gold scores, unscored queries and two candidate-set widths."""
    import pandas as pd

    from deer.platform.benchmark_rows import ranks_from_scores
    from kg_data.bear import BearDataset
    from kg_data.cloze import bear_cloze_task

    rng = np.random.default_rng(0)
    relations = {code: BearRelation(code=code, templates=["[X] is in [Y].", "[Y] holds [X]."],
                                    answer_ids=[f"a{i}" for i in range(width)], answer_labels=[f"A{i}" for i in range(width)],
                                    subject_ids=[f"s{i}" for i in range(60)], subject_labels=[f"S{i}" for i in range(60)],
                                    gold=rng.integers(0, width, 60), rows=np.arange(60), domains=[], cardinality="N:1",
                                    total_instances=60)
                 for code, width in (("P1", 9), ("P2", 4))}
    task = bear_cloze_task(BearDataset("mini", "", relations, []))
    scores = {i: np.round(rng.random(len(task.candidate_set(q))), 1) for i, q in enumerate(task.queries) if i % 5}
    for i in list(scores)[:10]:
        scores[i][task.queries[i].gold] = np.nan
    chunked = ranks_from_scores(task, scores, "bear", chunk_rows=16)
    pd.testing.assert_frame_equal(chunked, ranks_from_scores(task, scores, "bear", chunk_rows=1))
    assert chunked["bear_rank"].isna().sum() == len(task.queries) - len(scores)
    assert (chunked["bear_rank"] >= 1).sum() == len(scores) and chunked["bear_rank"].max() > 4  # NaN golds rank last


def test_a_row_without_a_valid_gold_score_is_never_correct():
    """A query whose scores are all invalid (or whose gold's is) ranks last and is not correct, even where
    the first of its (invalid) candidates is the gold: in the cloze rows and in BEAR's correctness."""
    import pandas as pd

    from bear_ref.dataset import correctness
    from deer.platform.benchmark_rows import ranks_from_scores
    from kg_data.task import CandidateSet, ClozeQuery, Task

    rows = [[np.nan, np.nan, np.nan], [-np.inf, -np.inf, -np.inf], [-np.inf, np.nan, -np.inf], [0.9, 0.1, 0.2]]
    query = ClozeQuery("S", "r", "f", 0, "template", 0, "[X] [Y]", "x", "a", "set", 0)
    task = Task("t", [query] * len(rows), {"set": CandidateSet(["a", "b", "c"])}, {})
    frame = ranks_from_scores(task, {i: np.array(row) for i, row in enumerate(rows)}, "p")
    assert frame["p_rank"].tolist() == [3.0, 3.0, 3.0, 1.0]
    assert frame["p_correct"].tolist() == [0.0, 0.0, 0.0, 1.0]
    table = pd.DataFrame({"predicted_id": ["a", "a", "a", "b"], "obj_id": ["a", "a", "a", "a"],
                          "gold_score": [np.nan, -np.inf, 0.5, 0.5], "rank": [3.0, 3.0, 1.0, 2.0]})
    assert correctness(table, "first").tolist() == [False, False, True, False]
    assert correctness(table, "wrong").tolist() == [False, False, True, False]
