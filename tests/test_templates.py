"""DEER prompt templates: the paper's text, seeded per-query sampling, shared mode."""

from __future__ import annotations

from deer.templates import PromptTemplates
from kg_data.textual import load_textual_kg


def test_tail_prompt_text(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    prompt = PromptTemplates.tail_prompt(kg, kg.entity_index["e0"])
    assert prompt == (
        'dog - a domesticated carnivorous mammal\nThis sentence: "{word}" means in one word: "{one word}"\n'
        'This sentence: "dog" means in one word: "'
    )


def test_query_prompt_structure(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    templates = PromptTemplates(k_shot=3, seed=1)
    triple = (kg.entity_index["e6"], kg.relation_index["capital_of"], kg.entity_index["e7"])
    lines = templates.query_prompt(kg, triple).split("\n")
    assert len(lines) == 4
    assert lines[-1] == "(berlin, capital of,"
    train_lines = {templates.example_line(kg, *t) for t in kg.triples("train").tolist()}
    assert set(lines[:3]) <= train_lines and len(set(lines[:3])) == 3
    assert PromptTemplates(k_shot=3, seed=1, query_trailing_space=True).query_prompt(kg, triple).endswith("(berlin, capital of, ")
    assert templates.query_context(kg, triple) + templates.continuation(kg, triple[2]) == "\n".join(lines[:3]) + "\n(berlin, capital of, germany)"


def test_sampling_is_seeded_per_query_and_shared_mode(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    per_query = PromptTemplates(k_shot=4, seed=7)
    a, b = kg.triples("test").tolist()[:2]
    assert per_query.example_rows(kg, a).tolist() == per_query.example_rows(kg, a).tolist()
    examples_by_query = {tuple(per_query.example_rows(kg, t).tolist()) for t in kg.triples("test").tolist()}
    assert len(examples_by_query) > 1, "per-query mode must resample"
    shared = PromptTemplates(k_shot=4, seed=7, shots="shared")
    assert shared.example_rows(kg, a).tolist() == shared.example_rows(kg, b).tolist()


def test_query_never_shows_its_own_triple(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    templates = PromptTemplates(k_shot=8, seed=0)
    train = kg.triples("train")
    for triple in train.tolist():
        rows = templates.example_rows(kg, triple)
        assert len(rows) == 8
        assert triple not in train[rows].tolist()
