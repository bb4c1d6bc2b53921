"""The known-true filters built from arrays for the queries' (h, r) pairs equal the plain dictionary
of every triple's tails (``kg_data.known_tails``), on the tiny KG, a synthetic KG with many repeated
(h, r) pairs, and WN18RR where the data is present."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from kg_data.queries import build_queries, known_tails


def _plain_filters(queries):
    tails, position = known_tails(queries.kg), np.full(queries.kg.n_entities, -1)
    position[queries.candidates] = np.arange(len(queries.candidates))
    return [np.asarray(sorted(position[t] for t in tails[(h, r)] if t != tail and position[t] >= 0), dtype=np.int64)
            for h, r, tail in queries.triples.tolist()]


def _assert_equal_filters(kg, split, subset=None, seed=0):
    queries = build_queries(kg, split, subset=subset, seed=seed)
    plain = _plain_filters(queries)
    assert len(plain) == len(queries.filter_tails)
    for expected, got in zip(plain, queries.filter_tails, strict=True):
        assert got.dtype == np.int64 and np.array_equal(expected, got)
    return sum(len(f) for f in plain)


def test_tiny_kg(tiny_kg_dir):
    from kg_data.textual import load_textual_kg

    kg = load_textual_kg(tiny_kg_dir)
    assert _assert_equal_filters(kg, "test") > 0  # e0 _hypernym has e2 and e3
    _assert_equal_filters(kg, "train", subset=4, seed=1)


def test_synthetic_kg_with_repeated_pairs(tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from synthetic_kg import write_synthetic_kg

    from kg_data.textual import load_textual_kg

    write_synthetic_kg(tmp_path / "kg", 5_000, seed=2)
    kg = load_textual_kg(tmp_path / "kg")
    assert _assert_equal_filters(kg, "test") > 0
    assert _assert_equal_filters(kg, "train", subset=400, seed=5) > 0


def test_wn18rr():
    from kg_data.errors import KGNotFoundError
    from kg_data.load import load_kg

    try:
        kg = load_kg("wn18rr")
    except KGNotFoundError:
        pytest.skip("WN18RR is not here")
    assert _assert_equal_filters(kg, "test") == 17627
    _assert_equal_filters(kg, "valid", subset=500, seed=3)


def _plain_example_rows(templates, kg, triple):
    """The examples as first written: a pass over the train split per query (rows showing the query's head and relation
    names are not eligible), the train rows taken in order of their (head id, relation id, tail id) text."""
    ids, relation_ids = list(kg.entity_ids), kg.relation_ids
    train = kg.splits["train"]
    content = np.asarray(sorted(range(len(train)), key=lambda i: (ids[train[i, 0]], relation_ids[train[i, 1]], ids[train[i, 2]])))
    head, relation = int(triple[0]), int(triple[1])
    names, relation_names = np.asarray(list(kg.entity_names)), np.asarray(kg.relation_names)
    rows = train[content]
    eligible = (names[rows[:, 0]] != names[head]) | (relation_names[rows[:, 1]] != relation_names[relation])
    k = min(templates.k_shot, int(eligible.sum()))
    if templates.shots == "shared":
        order = np.random.default_rng([templates.seed]).permutation(len(train))[: k + len(train) - int(eligible.sum())]
        return content[order[eligible[order]][:k]]
    # seeded by the head's and relation's ids (their text's 64-bit blake2b), not their rows in the entity/relation files
    codes = [int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "little")
             for i in (ids[head], relation_ids[relation])]
    positions = np.random.default_rng([templates.seed, *codes]).choice(int(eligible.sum()), size=k, replace=False)
    return content[np.flatnonzero(eligible)[positions]]


@pytest.mark.parametrize("shots, seed, k_shot", [("per-query", 0, 8), ("shared", 3, 8), ("per-query", 7, 40)])
def test_few_shot_rows_from_the_pair_index_equal_a_pass_over_train(tmp_path, shots, seed, k_shot):
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from synthetic_kg import write_synthetic_kg

    from deer.platform.templates import PromptTemplates
    from kg_data.textual import load_textual_kg

    write_synthetic_kg(tmp_path / "kg", 2_000, seed=4)
    kg = load_textual_kg(tmp_path / "kg")
    templates = PromptTemplates(k_shot=k_shot, shots=shots, seed=seed)
    train = kg.splits["train"]
    keys = train[:, 0] * kg.n_relations + train[:, 1]
    popular = train[np.flatnonzero(keys == np.argmax(np.bincount(keys)))[0]]  # a pair with several rows
    triples = np.concatenate([kg.splits["test"][:60], train[:60], popular[None]])
    for triple in triples:
        assert np.array_equal(templates.example_rows(kg, triple), _plain_example_rows(templates, kg, triple))
    same_pair = [int(((train[:, 0] == h) & (train[:, 1] == r)).sum()) for h, r, _ in triples.tolist()]
    assert same_pair[-1] > 1
    assert templates.examples_used(kg, triples).tolist() == [min(k_shot, len(train) - n) for n in same_pair]


def _plain_candidate_counts(n_candidates, filter_tails, filtered, excluded):
    """The counts as first written: a loop over the queries."""
    counts = np.full(len(filter_tails), n_candidates, dtype=np.float64)
    if filtered:
        counts -= np.asarray([len(f) for f in filter_tails], dtype=np.float64)
    for i, (out, others) in enumerate(zip(excluded, filter_tails, strict=True)):
        if out >= 0 and not (filtered and out in others):
            counts[i] -= 1
    return counts


def test_filters_held_as_two_arrays_read_as_the_per_query_arrays():
    """``FilterTails`` (offsets + positions) reads as the list of arrays it replaces: indexing, slicing,
    taking rows, remapping positions and the counts the metrics need, each against the list."""
    from deer.platform.ranking import candidate_counts, filter_counts
    from kg_data.queries import FilterTails

    rng = np.random.default_rng(0)
    rows = [np.sort(rng.choice(50, size=rng.integers(0, 5), replace=False)).astype(np.int64) for _ in range(40)]
    filters = FilterTails.of(rows)
    assert len(filters) == 40 and filters == rows and filters.lengths().tolist() == [len(r) for r in rows]
    for i in (0, 7, 39, -1):
        assert filters[i].dtype == np.int64 and np.array_equal(filters[i], rows[i])
    with pytest.raises(IndexError):
        filters[40]
    picked = np.array([5, 3, 3, 30])
    assert filters.take(picked) == [rows[i] for i in picked] and filters[10:20] == rows[10:20]
    assert filters[::-3] == rows[::-3] and filters[35:99] == rows[35:99] and filters[[2, -1]] == [rows[2], rows[-1]]
    assert filters.lengths(picked).tolist() == [len(rows[i]) for i in picked]
    new_position = np.where(np.arange(50) % 3 == 0, -1, np.cumsum(np.arange(50) % 3 != 0) - 1)
    assert filters.remap(new_position) == [new_position[r][new_position[r] >= 0] for r in rows]
    excluded = np.where(rng.random(40) < 0.5, rng.integers(0, 50, size=40), -1)
    excluded[:3] = [rows[i][0] if len(rows[i]) else -1 for i in range(3)]  # some excluded among the filters
    for filtered in (False, True):
        assert np.array_equal(candidate_counts(50, filters, filtered, excluded), _plain_candidate_counts(50, rows, filtered, excluded))
    counts, inside = filter_counts(rows, np.arange(40), excluded)
    assert counts.tolist() == [len(r) for r in rows]
    assert inside.tolist() == [bool(e >= 0 and e in r) for e, r in zip(excluded, rows, strict=True)]
    with pytest.raises(ValueError, match="offsets"):
        FilterTails(np.array([0, 3]), np.zeros(2, np.int64))
