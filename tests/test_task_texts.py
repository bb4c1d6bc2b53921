"""The texts the probes make of a task (deer/platform/task_texts.py): a KG's queries as the one task type
(``kg_benchmark_task``: one streamed set, known answers as arrays, the DEER templates' texts) and a benchmark's
(``ClozeTexts``), the same calls for both."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deer.platform.cloze_texts import deer_query_text, lama_rule
from deer.platform.task_texts import KG_CANDIDATE_SET, ClozeTexts, kg_benchmark_task, texts_of
from deer.platform.templates import PromptTemplates, candidate_prompt
from kg_data import load_kg
from kg_data.cloze import statement
from kg_data.queries import build_queries


def test_a_kgs_queries_as_a_benchmark_task_keep_their_texts(tiny_kg_dir):
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    templates = PromptTemplates(k_shot=2)
    task = kg_benchmark_task(queries, templates)
    kg = queries.kg
    assert [q.gold for q in task.queries] == queries.gold.tolist() and list(task.candidate_sets) == [KG_CANDIDATE_SET]
    assert task.texts.queries is queries and len(task.queries) == len(queries)
    assert tuple(task.candidate_sets[KG_CANDIDATE_SET].labels) == tuple(kg.entity_names[e] for e in queries.candidates)
    assert tuple(task.candidate_sets[KG_CANDIDATE_SET].descriptions) == tuple(kg.entity_descriptions[e] for e in queries.candidates)
    for query, triple in zip(task.queries, queries.triples.tolist(), strict=True):
        for position, entity in enumerate(queries.candidates):
            label = task.candidate_sets[KG_CANDIDATE_SET].labels[position]
            assert statement(query, label) == templates.query_context(kg, triple) + templates.continuation(kg, entity)
        assert deer_query_text(query) == templates.query_prompt(kg, tuple(triple))
        assert lama_rule(query) == "next-token"  # by LAMA's rule: only ')' follows the answer slot


def test_a_kgs_task_names_relations_sharing_a_name_apart(tiny_kg_dir):
    """Two relation ids of one name are two relations in a KG's task, labelled as the KG probes' ranks
    tables label them ("name (id)"; they were one relation, pooled by relation); distinct names stay as they were."""
    kg = load_kg(tiny_kg_dir)
    templates = PromptTemplates(k_shot=0)
    plain = kg_benchmark_task(build_queries(kg, "test"), templates)
    assert [q.relation for q in plain.queries] == [kg.relation_names[r] for r in build_queries(kg, "test").triples[:, 1]]
    assert [q.relation for q in plain.queries] == ["capital of", "hypernym", "hypernym", "hypernym"]
    names = ["hypernym" if name == "capital of" else name for name in kg.relation_names]
    shared = kg_benchmark_task(build_queries(dataclasses.replace(kg, relation_names=names), "test"), templates)
    assert [q.relation for q in shared.queries] == ["hypernym (capital_of)"] + ["hypernym (_hypernym)"] * 3


def test_a_slot_marker_in_a_kg_text_is_refused_by_query(tiny_kg_dir):
    kg = load_kg(tiny_kg_dir)
    kg.entity_names[int(build_queries(kg, "train").triples[0, 0])] = "a [Y] name"
    with pytest.raises(ValueError, match="its text holds .X. or .Y."):
        list(kg_benchmark_task(build_queries(kg, "train"), PromptTemplates(k_shot=0)).queries)  # made when read



@pytest.mark.parametrize("exclude_head", [False, True])
def test_a_kgs_task_carries_its_known_answers_as_arrays(tiny_kg_dir, exclude_head):
    """The filters, excluded and head positions the rank step reads are the QuerySet's, as arrays; a subset takes
    its rows' (what a run's groups would rank)."""
    queries = build_queries(load_kg(tiny_kg_dir), "test", exclude_head=exclude_head)
    task = kg_benchmark_task(queries, PromptTemplates(k_shot=1))
    known = task.known
    assert known.candidates == len(queries.candidates) and task.candidate_sets[KG_CANDIDATE_SET].streamed
    np.testing.assert_array_equal(known.gold, queries.gold)
    np.testing.assert_array_equal(known.excluded_positions(), queries.excluded_positions())
    np.testing.assert_array_equal(known.head_positions(), queries.head_positions())
    assert known.filter_tails == queries.filter_tails
    rows = [2, 0]
    part = task.subset(rows).known
    np.testing.assert_array_equal(part.gold, queries.gold[rows])
    assert part.filter_tails == queries.filter_tails.take(np.asarray(rows))


def test_a_kgs_texts_are_the_templates_and_a_benchmarks_its_queries(tiny_kg_dir):
    """What DEER and LAMA encode of a KG is the DEER templates' text (the authors' style too: its special tokens, its
    trailing space); a task without texts of its own gets ``ClozeTexts`` of its queries."""
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    kg = queries.kg
    for templates in (PromptTemplates(k_shot=2), PromptTemplates(k_shot=2, style="authors")):
        task = kg_benchmark_task(queries, templates)
        texts = texts_of(task)
        assert texts.special_tokens == templates.prompt_special_tokens
        assert texts.query_prompts() == [templates.query_prompt(kg, tuple(t)) for t in queries.triples.tolist()]
        assert texts.candidate_prompts(KG_CANDIDATE_SET, np.array([1, 0])) == [
            templates.tail_prompt(kg, int(e)) for e in queries.candidates[[1, 0]]]
        assert texts.row_ids() == queries.item_ids() and texts.identity()["kg_fingerprint"] == kg.fingerprint()
    cloze = dataclasses.replace(kg_benchmark_task(queries, PromptTemplates(k_shot=0)), texts=None, known=None)
    texts = texts_of(cloze)
    assert isinstance(texts, ClozeTexts) and texts.special_tokens == "bos"
    assert texts.query_prompts() == [deer_query_text(q) for q in cloze.queries]
    labels, descriptions = cloze.candidate_sets[KG_CANDIDATE_SET].labels, cloze.candidate_sets[KG_CANDIDATE_SET].descriptions
    assert texts.candidate_prompts(KG_CANDIDATE_SET, np.arange(2)) == [candidate_prompt(labels[i], descriptions[i]) for i in range(2)]


def test_a_kgs_queries_by_set_are_read_without_making_them_and_equal_the_general_grouping(tiny_kg_dir):
    """``Task.rows_by_set``: a task with known answers over one set groups its queries without making them; the same
    task without them groups by each query's set, to the same rows."""
    task = kg_benchmark_task(build_queries(load_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=0))
    shortcut = task.rows_by_set()
    assert shortcut == {KG_CANDIDATE_SET: list(range(len(task.queries)))}
    assert dataclasses.replace(task, known=None).rows_by_set() == shortcut
