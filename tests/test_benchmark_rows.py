"""deer/platform/benchmark_rows.py: the cloze rows ranked from each query's candidate scores."""

from __future__ import annotations

import numpy as np
import pytest

from deer.platform.benchmark_rows import ranks_from_scores
from kg_data.bear import BearRelation
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
