"""kg_data/textual.py: a user's own KG in TSV or JSONL files: its records, its parts and its splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kg_data import KGSplitError, build_queries
from kg_data.textual import load_textual_kg
from tests.conftest import TINY_ENTITIES
from tests.kg_faults import _format_error, _jsonl_kg
from tests.refusals import _model_copy, assert_refused_before_loading


@pytest.mark.parametrize(
    "part, record, problem",
    [
        ("entities", {"id": "c", "name": None}, "key 'name' must be a string, got null"),
        ("entities", {"id": "c", "name": ["gamma"]}, "key 'name' must be a string, got array"),
        ("entities", {"id": "c", "name": {"en": "gamma"}}, "key 'name' must be a string, got object"),
        ("entities", {"id": "c", "name": True}, "key 'name' must be a string, got boolean"),
        ("entities", {"id": "c", "name": 3}, "key 'name' must be a string, got integer"),
        ("entities", {"id": True, "name": "gamma"}, "key 'id' must be a string or an integer, got boolean"),
        ("entities", {"id": 1.5, "name": "gamma"}, "key 'id' must be a string or an integer, got number"),
        ("entities", {"id": None, "name": "gamma"}, "key 'id' must be a string or an integer, got null"),
        ("entities", {"id": "c", "name": "gamma", "description": ["x"]}, "key 'description' must be a string or null, got array"),
        ("entities", {"id": "c", "name": "gam\nma"}, "key 'name' must not contain a tab or line break"),
        ("entities", {"id": "c", "name": "gam\rma"}, "key 'name' must not contain a tab or line break"),
        ("entities", {"id": "c", "name": "gamma", "description": "one\ntwo"}, "key 'description' must not contain a tab or line break"),
        ("entities", {"id": "c\td", "name": "gamma"}, "key 'id' must not contain a tab or line break"),
        ("relations", {"id": "t", "name": None}, "key 'name' must be a string, got null"),
        ("relations", {"id": "t", "name": "line\nbreak"}, "key 'name' must not contain a tab or line break"),
        ("test", {"head": "a", "relation": ["r"], "tail": "b"}, "key 'relation' must be a string or an integer, got array"),
        ("test", {"head": "a", "relation": "r", "tail": False}, "key 'tail' must be a string or an integer, got boolean"),
    ],
)
def test_jsonl_wrong_value_types(tmp_path, part, record, problem):
    good = {
        "entities": [{"id": "a", "name": "alpha"}, {"id": "b", "name": "beta"}],
        "relations": [{"id": "r", "name": "related to"}, {"id": "q", "name": "equal to"}],
        "test": [{"head": "a", "relation": "r", "tail": "b"}] * 2,
    }
    folder = _jsonl_kg(tmp_path / "kg", **{part: good[part] + [record]})
    error = _format_error(folder)
    assert str(error) == f"{folder / f'{part}.jsonl'}:3: {problem}"


def test_jsonl_integer_ids_and_null_description(tmp_path):
    folder = _jsonl_kg(
        tmp_path / "kg",
        entities=[{"id": 1, "name": "one", "description": None}, {"id": "2", "name": "two"}],
        relations=[{"id": 7, "name": "seven"}],
        test=[{"head": 1, "relation": 7, "tail": 2}],
    )
    kg = load_textual_kg(folder)
    assert kg.entity_ids == ["1", "2"] and kg.relation_ids == ["7"]
    assert kg.entity_descriptions == ["-", "-"]
    assert kg.triples("test").tolist() == [[0, 0, 1]]


def test_jsonl_empty_name_is_still_refused(tmp_path):
    folder = _jsonl_kg(tmp_path / "kg", entities=[{"id": "a", "name": "alpha"}, {"id": "b", "name": ""}])
    error = _format_error(folder)
    assert str(error) == f"{folder / 'entities.jsonl'}:2: empty name for entity 'b'"


@pytest.mark.parametrize(
    "extra, names",
    [
        ("entities.jsonl", "entities.tsv and entities.jsonl"),
        ("relations.jsonl", "relations.tsv and relations.jsonl"),
        ("train.jsonl", "train.tsv and train.jsonl"),
        ("test.jsonl", "test.tsv and test.jsonl"),
        ("dev.tsv", "valid.tsv and dev.tsv"),
        ("dev.jsonl", "valid.tsv and dev.jsonl"),
    ],
)
def test_two_files_for_one_part_are_ambiguous(tiny_kg_dir, extra, names):
    (tiny_kg_dir / extra).write_text("")
    error = _format_error(tiny_kg_dir)
    assert (error.path, error.line) == (str(tiny_kg_dir), None)
    assert str(error) == f"{tiny_kg_dir}: ambiguous: {names} are present; keep only one of them"


def test_dev_alone_is_the_valid_split(tiny_kg_dir):
    (tiny_kg_dir / "valid.tsv").rename(tiny_kg_dir / "dev.tsv")
    kg = load_textual_kg(tiny_kg_dir)
    assert len(kg.triples("valid")) == 1 and kg.split_files["valid"] == str(tiny_kg_dir / "dev.tsv")


def test_missing_split_raises_kg_split_error(tiny_kg_dir):
    (tiny_kg_dir / "valid.tsv").unlink()
    kg = load_textual_kg(tiny_kg_dir)
    expected = f"KG 'tiny_kg' (folder {tiny_kg_dir}) has no 'valid' split (no valid.tsv/dev.tsv or .jsonl); it has: train, test"
    with pytest.raises(KGSplitError) as error:
        kg.triples("valid")
    assert type(error.value) is KGSplitError and isinstance(error.value, ValueError)
    assert str(error.value) == expected
    with pytest.raises(KGSplitError, match="has no 'valid' split"):
        build_queries(kg, "valid")
    with pytest.raises(KGSplitError, match=r"has no 'other' split; it has: train, test"):
        kg.triples("other")


def test_empty_split_names_its_file(tiny_kg_dir):
    (tiny_kg_dir / "test.tsv").write_text("\n")
    kg = load_textual_kg(tiny_kg_dir)
    assert kg.split_files == {split: str(tiny_kg_dir / f"{split}.tsv") for split in ("train", "valid", "test")}
    assert len(kg.triples("test")) == 0  # loading an empty split is fine; probing it is not
    with pytest.raises(KGSplitError) as error:
        build_queries(kg, "test")
    assert type(error.value) is KGSplitError
    assert str(error.value) == f"{tiny_kg_dir / 'test.tsv'}: the test split has no triples; nothing to probe"


@pytest.mark.parametrize(("present", "odd"), [("train.tsv", "train.txt"), ("test.tsv", "test.csv"), ("valid.tsv", "dev.txt"),
                                              ("train.tsv", "Train.tsv"), ("valid.tsv", "valid")])
def test_a_split_file_with_a_suffix_not_read_is_refused(tiny_kg_dir, present, odd):
    """Audit E7: train.txt beside test.tsv was ignored without a word: the KG had no train split, the known-true filter
    missed its tails and filtered ranks changed silently."""
    (tiny_kg_dir / present).rename(tiny_kg_dir / odd)
    error = _format_error(tiny_kg_dir)
    assert error.path == str(tiny_kg_dir / odd) and ".tsv" in str(error) and ".jsonl" in str(error)
    assert "not read" in str(error)


def test_a_stray_file_beside_a_split_that_is_read_is_left_alone(tiny_kg_dir):
    (tiny_kg_dir / "train.txt").write_text("not a split\n")
    (tiny_kg_dir / "test.tsv.bak").write_text("not a split\n")
    assert len(load_textual_kg(tiny_kg_dir).triples("train")) == 9


# -- empty entity and relation files, lone surrogates in JSONL, through the CLI --------------------


def _jsonl_entities(kg: Path, records: list[dict]) -> None:
    (kg / "entities.tsv").unlink()
    (kg / "entities.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))  # json.dumps writes \ud800 escaped


def _entity_records(**change) -> list[dict]:
    records = [{"id": i, "name": n, "description": d} for i, n, d in TINY_ENTITIES]
    records[2].update(change)
    return records


KG_CASES = [
    ("empty entities.tsv", lambda kg: (kg / "entities.tsv").write_text(""), ["entities.tsv: no entities"]),
    ("blank-only entities.tsv", lambda kg: (kg / "entities.tsv").write_text("\n\n"), ["entities.tsv: no entities"]),
    ("empty entities.jsonl", lambda kg: _jsonl_entities(kg, []), ["entities.jsonl: no entities"]),
    ("empty relations.tsv", lambda kg: (kg / "relations.tsv").write_text(""), ["relations.tsv: no relations"]),
    ("lone surrogate in a name", lambda kg: _jsonl_entities(kg, _entity_records(name="\ud800")),
     ["entities.jsonl:3", "key 'name'", "lone surrogate"]),
    ("lone surrogate in a description", lambda kg: _jsonl_entities(kg, _entity_records(description="x\udfff")),
     ["entities.jsonl:3", "key 'description'", "lone surrogate"]),
]


@pytest.mark.parametrize("name, build, expected", KG_CASES, ids=[c[0] for c in KG_CASES])
def test_cli_bad_kg_file_is_named(name, build, expected, tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    build(tiny_kg_dir)
    model = _model_copy(tiny_clm_dir, tmp_path)
    assert_refused_before_loading(["probe", "--kg", str(tiny_kg_dir), "--model", model], expected, tmp_path, monkeypatch, name)
