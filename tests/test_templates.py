"""DEER prompt templates: the paper's text and the DEER authors' package text, seeded sampling."""

from __future__ import annotations

import dataclasses

import pytest

from deer.platform.templates import PromptTemplates
from kg_data.textual import load_textual_kg

STYLES = [
    PromptTemplates(k_shot=3, seed=5),
    PromptTemplates(k_shot=3, seed=5, shots="shared"),
    PromptTemplates(k_shot=3, seed=5, query_trailing_space=True),
    PromptTemplates(k_shot=3, seed=5, style="authors"),
]


def test_tail_prompt_text(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    prompt = PromptTemplates.tail_prompt(kg, kg.entity_index["e0"])
    assert prompt == (
        'dog - a domesticated carnivorous mammal\nThis sentence: "{word}" means in one word: "{one word}"\n'
        'This sentence: "dog" means in one word: "'
    )
    # One tail text for both styles, so one entity-embedding cache key.
    assert PromptTemplates(style="authors").tail_prompt(kg, 0) == PromptTemplates().tail_prompt(kg, 0)


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
    assert PromptTemplates(k_shot=0).query_prompt(kg, triple) == "(berlin, capital of,"


def test_authors_style_text(tiny_kg_dir):
    """deer-probe 0.1.1: f"{fewshot}\\n{h} - {definition}\\n({h}, {r}, ", no blank line, one few-shot set."""
    kg = load_textual_kg(tiny_kg_dir)
    templates = PromptTemplates(k_shot=2, seed=3, style="authors")
    assert (templates.shots, templates.query_trailing_space) == ("shared", True)
    berlin = (kg.entity_index["e6"], kg.relation_index["capital_of"], kg.entity_index["e7"])
    oak = (kg.entity_index["e10"], kg.relation_index["_hypernym"], kg.entity_index["e9"])
    examples = templates.examples_text(kg, berlin)
    assert len(examples.split("\n")) == 2 and examples == templates.examples_text(kg, oak)
    assert templates.query_prompt(kg, berlin) == examples + "\nberlin - the capital of Germany\n(berlin, capital of, "
    assert templates.query_prompt(kg, oak) == examples + "\noak - a deciduous tree of the genus Quercus\n(oak, hypernym, "
    # The likelihood probes' context ends at the comma; the continuation carries the space.
    assert templates.query_context(kg, berlin) == examples + "\nberlin - the capital of Germany\n(berlin, capital of,"
    assert templates.query_trailing_space and not PromptTemplates().query_trailing_space
    # No examples: the definition line opens the prompt (no leading newline).
    assert PromptTemplates(k_shot=0, style="authors").query_prompt(kg, berlin) == "berlin - the capital of Germany\n(berlin, capital of, "


def test_sampling_is_seeded_per_query_and_shared_mode(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    per_query = PromptTemplates(k_shot=4, seed=7)
    a, b = kg.triples("test").tolist()[:2]
    assert per_query.example_rows(kg, a).tolist() == per_query.example_rows(kg, a).tolist()
    examples_by_query = {tuple(per_query.example_rows(kg, t).tolist()) for t in kg.triples("test").tolist()}
    assert len(examples_by_query) > 1, "per-query mode must resample"
    shared = PromptTemplates(k_shot=4, seed=7, shots="shared")
    assert shared.example_rows(kg, a).tolist() == shared.example_rows(kg, b).tolist()
    assert len({tuple(PromptTemplates(k_shot=4, seed=s).example_rows(kg, a).tolist()) for s in range(5)}) > 1, "seeded"


@pytest.mark.parametrize("templates", STYLES, ids=lambda t: f"{t.style}-{t.shots}-{t.query_trailing_space}")
def test_the_order_of_the_entity_relation_and_train_files_changes_no_prompt(tiny_kg_dir, tmp_path, templates):
    """entities.tsv and relations.tsv are lookup tables, train.tsv a set of triples: their lines in another order are the
    same KG, so every query gets the same prompt (the per-query examples were seeded by the head's and relation's row
    positions, and all examples were drawn by train row position)."""
    import shutil

    reordered = tmp_path / "reordered"
    shutil.copytree(tiny_kg_dir, reordered)
    for name in ("entities.tsv", "relations.tsv", "train.tsv"):
        (reordered / name).write_text("".join(reversed((tiny_kg_dir / name).read_text().splitlines(True))))
    kg, other = load_textual_kg(tiny_kg_dir), load_textual_kg(reordered)
    assert list(other.entity_ids) == list(reversed(kg.entity_ids)) and other.relation_ids == kg.relation_ids[::-1]
    assert [other.entity_ids[h] for h in other.triples("train")[:, 0]] == [kg.entity_ids[h] for h in kg.triples("train")[::-1, 0]]
    for seed in range(3):
        these = dataclasses.replace(templates, seed=seed)
        for triple in kg.triples("test").tolist():
            head, relation, tail = triple  # the same triple's indices in the reordered KG
            same = (other.entity_index[kg.entity_ids[head]], other.relation_index[kg.relation_ids[relation]],
                    other.entity_index[kg.entity_ids[tail]])
            assert these.query_prompt(other, same) == these.query_prompt(kg, tuple(triple)), (seed, triple)


@pytest.mark.parametrize("templates", STYLES, ids=lambda t: f"{t.style}-{t.shots}-{t.query_trailing_space}")
def test_queries_differing_only_in_the_gold_tail_get_identical_prompts(tiny_kg_dir, templates):
    kg = load_textual_kg(tiny_kg_dir)
    # Includes (dog, hypernym, mammal) and (dog, hypernym, animal): both are train triples.
    for head, relation, _ in kg.all_triples().tolist():
        prompts = {templates.query_prompt(kg, (head, relation, tail)) for tail in range(kg.n_entities)}
        contexts = {templates.query_context(kg, (head, relation, tail)) for tail in range(kg.n_entities)}
        assert len(prompts) == 1 and len(contexts) == 1


@pytest.mark.parametrize("shots", ["per-query", "shared"])
def test_k_shots_when_the_train_split_has_exactly_k_triples(tiny_kg_dir, shots):
    kg = load_textual_kg(tiny_kg_dir)
    train = kg.triples("train")
    berlin = (kg.entity_index["e6"], kg.relation_index["capital_of"], kg.entity_index["e7"])  # no (berlin, capital of) in train
    for k_shot in (len(train) - 1, len(train), len(train) + 1):
        rows = PromptTemplates(k_shot=k_shot, shots=shots).example_rows(kg, berlin)
        assert len(rows) == min(k_shot, len(train)) == len(set(rows.tolist()))


@pytest.mark.parametrize("shots", ["per-query", "shared"])
def test_query_never_shows_its_own_triple_nor_its_head_and_relation(tiny_kg_dir, shots):
    kg = load_textual_kg(tiny_kg_dir)
    templates = PromptTemplates(k_shot=8, seed=0, shots=shots)
    train = kg.triples("train")
    for triple in train.tolist():
        rows = templates.example_rows(kg, triple)
        others = [t for t in train.tolist() if t[:2] != triple[:2]]
        assert len(rows) == min(8, len(others))  # 8 of 9, or 7 when (h, r) has two train tails
        assert triple not in train[rows].tolist()
        assert all(t[:2] != triple[:2] for t in train[rows].tolist())


def _homonym_kg(folder):
    """Two entities named "tyrannize" (as two WN18RR synsets are): one's train triple is the other's test answer."""
    folder.mkdir()
    (folder / "entities.tsv").write_text("v1\ttyrannize\trule as a tyrant\nv2\ttyrannize\trule cruelly\nn1\ttyrant\ta dictator\n"
                                         "n2\tstar\ta celebrity\nn3\tmovie star\tan actor\nn4\tgrader\ta judge\n")
    (folder / "relations.tsv").write_text("drf\tderivationally related form\nhyp\thypernym\n")
    (folder / "train.tsv").write_text("v2\tdrf\tn1\nn3\thyp\tn2\nn4\thyp\tn2\n")
    (folder / "test.tsv").write_text("v1\tdrf\tn1\n")
    return load_textual_kg(folder)


@pytest.mark.parametrize("style, shots", [("paper", "per-query"), ("paper", "shared"), ("authors", "shared")])
def test_no_example_shows_the_querys_head_and_relation_text(tmp_path, style, shots):
    """WN18RR test row 2975, (tyrannize, derivationally related form, ?): its shared examples held the line
    "(tyrannize, derivationally related form, tyrant)", the train triple of another synset named "tyrannize": the
    query's answer in its own prompt. Examples are excluded by the text they show, not only by the head's id."""
    kg = _homonym_kg(tmp_path / "kg")
    query = tuple(kg.triples("test")[0].tolist())
    head_text = f"({kg.entity_names[query[0]]}, {kg.relation_names[query[1]]},"
    templates = PromptTemplates(k_shot=8, style=style, shots=shots)
    lines = templates.examples_text(kg, query).split("\n")
    shown = [t for t in kg.triples("train").tolist()  # the train triples whose text differs from the query's: all of them
             if (kg.entity_names[t[0]], kg.relation_names[t[1]]) != (kg.entity_names[query[0]], kg.relation_names[query[1]])]
    assert sorted(lines) == sorted(templates.example_line(kg, *t) for t in shown)
    assert not any(line.startswith(head_text) for line in lines)
    assert templates.examples_used(kg, [query]).tolist() == [len(shown)]


def test_no_wn18rr_test_prompt_shows_its_head_and_relation_text():
    from kg_data.errors import KGNotFoundError
    from kg_data.load import load_kg

    try:
        kg = load_kg("wn18rr")
    except KGNotFoundError:
        pytest.skip("WN18RR is not here")
    for templates in (PromptTemplates(shots="shared"), PromptTemplates()):
        for head, relation, tail in kg.triples("test").tolist():
            opening = f"({kg.entity_names[head]}, {kg.relation_names[relation]},"
            lines = templates.examples_text(kg, (head, relation, tail)).split("\n")
            assert not any(line.startswith(opening) for line in lines), (templates.shots, opening)


def test_style_is_in_metadata_and_fingerprint():
    paper, authors = PromptTemplates(), PromptTemplates(style="authors")
    assert paper.to_metadata()["style"] == "paper" and authors.to_metadata()["style"] == "authors"
    assert authors.to_metadata()["query_line"] == "{head} - {head_description}\n({head}, {relation}, "
    assert paper.to_metadata()["query_line"] == "({head}, {relation},"
    assert "head, relation" in paper.to_metadata()["shot_sampling"]
    # Same shots and trailing space, other style: the fingerprint (and so the query caches) differ.
    same_settings = PromptTemplates(shots="shared", query_trailing_space=True)
    assert same_settings.fingerprint() != authors.fingerprint()
    assert len({paper.fingerprint(), authors.fingerprint(), same_settings.fingerprint()}) == 3
    assert PromptTemplates(seed=0).fingerprint() == PromptTemplates(seed=0, shots="per-query", query_trailing_space=False).fingerprint()
    # One tail text, tokenised as the style says (the prompt store is keyed by the tokenisation too).
    assert (paper.prompt_special_tokens, same_settings.prompt_special_tokens, authors.prompt_special_tokens) == ("bos", "bos", "tokenizer")


def test_style_settings_are_checked():
    with pytest.raises(ValueError, match="style"):
        PromptTemplates(style="lama")
    with pytest.raises(ValueError, match="one few-shot set"):
        PromptTemplates(style="authors", shots="per-query")
    with pytest.raises(ValueError, match="ends the query with ', '"):
        PromptTemplates(style="authors", query_trailing_space=False)
    assert PromptTemplates(style="authors", shots="shared", query_trailing_space=True) == PromptTemplates(style="authors")


@pytest.mark.parametrize("field, value", [("seed", 1.5), ("seed", -1), ("seed", "3"), ("k_shot", 2.5), ("k_shot", True), ("k_shot", -1)])
def test_a_templates_object_checks_k_shot_and_seed_as_the_keywords_are(field, value):
    """k_shot= and seed= as keywords were checked (an integer >= 0), the same fields of a PromptTemplates given as an
    object were not: seed=1.5 ran as seed 1 while the run recorded 1.5, others failed deep in numpy after the model loaded."""
    from deer.platform.validate import OptionError

    with pytest.raises(OptionError, match=f"{field}={value!r}: must be"):
        PromptTemplates(**{field: value})


