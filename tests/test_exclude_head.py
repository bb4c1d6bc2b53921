"""The query's own head as a candidate: counted (head above gold), and optionally left out.

The plain path is ``rank_of`` on the score row with the excluded candidate deleted: leaving the
head out must equal ranking without it, raw and filtered, for score matrices and for cosine.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from deer.base.vectors import normalize_rows
from deer.platform.cosine_ranking import rank_cosine
from deer.platform.ranking import candidate_counts, rank_scores
from deer.platform.run_spec import queries_fingerprint
from tests.conftest import _train_queries as _queries
from tests.ranking_oracle import rank_of


def _plain_ranks(scores, queries, drop_head: bool):
    raw, filtered = [], []
    for i, row in enumerate(np.asarray(scores, dtype=np.float64)):
        keep = np.ones(len(row), dtype=bool)
        head = queries.head_positions()[i]
        if drop_head and head >= 0 and head != queries.gold[i]:
            keep[head] = False
        new_index = np.cumsum(keep) - 1
        others = [new_index[f] for f in queries.filter_tails[i] if keep[f]]
        raw.append(rank_of(row[keep], new_index[queries.gold[i]]))
        filtered.append(rank_of(row[keep], new_index[queries.gold[i]], np.asarray(others, dtype=np.int64)))
    return np.asarray(raw), np.asarray(filtered)


def test_excluding_the_head_equals_ranking_without_it(tiny_kg_dir):
    rng = np.random.default_rng(0)
    for exclude in (False, True):
        queries = _queries(tiny_kg_dir, exclude)
        scores = rng.normal(size=(len(queries), len(queries.candidates))).round(1)  # ties included
        ranking = rank_scores(scores, queries)
        raw, filtered = _plain_ranks(scores, queries, exclude)
        np.testing.assert_array_equal(ranking.ranks.raw, raw)
        np.testing.assert_array_equal(ranking.ranks.filtered, filtered)
        excluded = queries.excluded_positions()
        assert (excluded >= 0).sum() == (len(queries) if exclude else 0)
        for row, out in zip(ranking.top, excluded, strict=True):
            assert out < 0 or out not in row
        heads = queries.head_positions()
        expected_above = [scores[i, h] > scores[i, g] for i, (h, g) in enumerate(zip(heads, queries.gold, strict=True))]
        np.testing.assert_array_equal(ranking.head_above_gold, expected_above)
        counts = candidate_counts(len(queries.candidates), queries.filter_tails, False, excluded)
        assert (counts == len(queries.candidates) - (1 if exclude else 0)).all()


def test_cosine_ranking_honours_the_exclusion(tiny_kg_dir):
    rng = np.random.default_rng(1)
    queries = _queries(tiny_kg_dir, True)
    query_vectors = rng.normal(size=(len(queries), 8)).astype(np.float32)
    entity_vectors = rng.normal(size=(len(queries.candidates), 8)).astype(np.float32)
    cosine = rank_cosine(query_vectors, entity_vectors, queries, chunk_size=3)
    scores = normalize_rows(query_vectors) @ normalize_rows(entity_vectors).T
    plain = rank_scores(scores, queries)
    np.testing.assert_array_equal(cosine.ranks.raw, plain.ranks.raw)
    np.testing.assert_array_equal(cosine.ranks.filtered, plain.ranks.filtered)
    np.testing.assert_array_equal(cosine.head_above_gold, plain.head_above_gold)
    np.testing.assert_array_equal(cosine.top, plain.top)


def test_exclusion_is_part_of_the_run_spec(tiny_kg_dir):
    kept = _queries(tiny_kg_dir, False)
    assert queries_fingerprint(kept) != queries_fingerprint(dataclasses.replace(kept, exclude_head=True))


def test_probe_reports_and_drops_the_head(tiny_kg_dir, tiny_clm):
    import deer

    kept = deer.probe(str(tiny_kg_dir), tiny_clm, k_shot=2, show_progress=False)
    dropped = deer.probe(str(tiny_kg_dir), tiny_clm, k_shot=2, show_progress=False, exclude_head=True)
    assert kept.metrics["head/excluded"] is False and dropped.metrics["head/excluded"] is True
    assert kept.metrics["head/head_above_gold"] == dropped.metrics["head/head_above_gold"]
    assert dropped.metadata["exclude_head"] is True and dropped.spec != kept.spec
    scores = normalize_rows(kept.arrays["query_embeddings"]) @ normalize_rows(kept.arrays["entity_embeddings"]).T
    raw, filtered = _plain_ranks(scores, dropped.queries, True)
    np.testing.assert_allclose(dropped.ranks("raw"), raw)
    np.testing.assert_allclose(dropped.ranks("filtered"), filtered)


def test_ranks_table_counts_the_candidates_each_query_is_ranked_among(tiny_kg_dir):
    """The ranks table's n_candidates and n_filtered are the candidates a query's gold tail is ranked among and the
    known-true tails dropped from them: with the head left out it is no candidate (it was counted, so the table
    disagreed with metrics.json's random baseline)."""
    from deer.platform.kg_result import probe_metrics, query_frame
    from deer.platform.metrics import random_baseline

    for exclude in (False, True):
        queries = _queries(tiny_kg_dir, exclude)
        table = query_frame(queries)
        for i, row in table.iterrows():
            head = queries.head_positions()[i]
            dropped = exclude and head >= 0 and head != queries.gold[i]
            kept = [f for f in queries.filter_tails[i] if not (dropped and f == head)]
            assert row["n_candidates"] == len(queries.candidates) - dropped
            assert row["n_filtered"] == len(kept)
        ranks = rank_scores(np.random.default_rng(2).normal(size=(len(queries), len(queries.candidates))), queries).ranks
        baseline = probe_metrics(queries, ranks)["random_baseline"]["filtered"]
        assert random_baseline((table["n_candidates"] - table["n_filtered"]).to_numpy()) == baseline


def test_ranks_table_lists_every_candidate_of_a_self_loop(tmp_path, tiny_clm):
    """A KG of 6 entities run with exclude_head: a query whose head is its gold ranks all 6, the others 5.  The top-10
    column listed 5 names for every query, so a self-loop's list left out a candidate (the gold, where it ranked
    last), exit 0; each list now names every candidate its query ranks (n_candidates), the gold at its rank."""
    import deer

    names = ["dog", "cat", "animal", "mammal", "paris", "france"]
    folder = tmp_path / "kg"
    folder.mkdir()
    (folder / "entities.tsv").write_text("".join(f"e{i}\t{n}\t\n" for i, n in enumerate(names)))
    (folder / "relations.tsv").write_text("r0\tsimilar to\n")
    test = [(h, h) for h in range(6)] + [(0, 3), (1, 2)]
    for split, rows in {"train": [(0, 2)], "valid": [(1, 3)], "test": test}.items():
        (folder / f"{split}.tsv").write_text("".join(f"e{h}\tr0\te{t}\n" for h, t in rows))
    result = deer.probe(str(folder), tiny_clm, k_shot=0, show_progress=False, exclude_head=True)
    table = result.table
    assert table["n_candidates"].tolist() == [6] * 6 + [5, 5]
    for _, row in table.iterrows():
        listed = row["deer_top10"].split(" | ")
        assert len(listed) == len(set(listed)) == row["n_candidates"]
        assert row["head"] not in listed or row["head"] == row["tail"]  # an excluded head is never listed
        assert listed.index(row["tail"]) + 1 == row["deer_rank_raw"]  # the gold where its rank says (no ties)
