"""The Wikidata5M reader on small files in its published layout, and the synthetic KG generator."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from kg_data.errors import KGFormatError
from kg_data.wikidata5m import load_wikidata5m

FILES = {
    "wikidata5m_entity.txt": "Q1\tBerlin\tberlin city\nQ2\tGermany\nQ3\tParis\nQ9\tNot in any triple\nQ4\t \n",
    "wikidata5m_relation.txt": "P1\tcapital of\tis capital of\nP2\tshares border with\n",
    "wikidata5m_text.txt": "Q1\tBerlin is the capital of Germany.\nQ3\t \nQ9\tUnused.\n",
    "wikidata5m_transductive_train.txt": "Q1\tP1\tQ2\nQ2\tP2\tQ3\nQ4\tP2\tQ2\n",
    "wikidata5m_transductive_valid.txt": "Q3\tP2\tQ2\n",
    "wikidata5m_transductive_test.txt": "Q1\tP2\tQ3\nQ5\tP1\tQ2\nQ1\tP7\tQ2\n",
}


def _write(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in {**FILES, **changes}.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_reads_names_descriptions_and_counts_what_it_leaves_out(tmp_path):
    kg = load_wikidata5m(_write(tmp_path / "w5m"))
    assert kg.entity_ids == ["Q1", "Q2", "Q3"]  # alias-file order; Q9 is in no triple; Q4 and Q5 have no name
    assert kg.entity_names == ["Berlin", "Germany", "Paris"]
    assert kg.entity_descriptions == ["Berlin is the capital of Germany.", "-", "-"]
    assert kg.relation_names == ["capital of", "shares border with"]
    assert kg.splits["train"].tolist() == [[0, 0, 1], [1, 1, 2]]
    assert kg.splits["test"].tolist() == [[0, 1, 2]]
    assert kg.notes == {"alias_file_entities_not_in_a_triple": 1, "entities_without_description": 2,
                        "entities_with_more_aliases": 1, "entities_without_alias": 2,
                        "triples_dropped_without_alias": {"train": 1, "valid": 0, "test": 2}}
    assert kg.summary()["notes"] == kg.notes


def test_a_bad_line_is_named_with_file_and_line(tmp_path):
    folder = _write(tmp_path / "w5m", **{"wikidata5m_transductive_test.txt": "Q1\tP2\tQ3\nQ1\tP2\n"})
    with pytest.raises(KGFormatError, match=r"wikidata5m_transductive_test.txt:2"):
        load_wikidata5m(folder)
    _write(folder)
    (folder / "wikidata5m_text.txt").unlink()
    with pytest.raises(KGFormatError, match="wikidata5m_text.txt"):
        load_wikidata5m(folder)


def test_the_synthetic_generator_writes_both_layouts(tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from synthetic_kg import shape, write_synthetic_kg

    from kg_data.textual import load_textual_kg

    counts = write_synthetic_kg(tmp_path / "tsv", 3_000, seed=1)
    assert counts == shape(3_000) and counts["relations"] == 300 and counts["test"] == 300
    kg = load_textual_kg(tmp_path / "tsv")
    assert kg.n_entities == 3_000 and len(kg.splits["train"]) == counts["train"]
    write_synthetic_kg(tmp_path / "w5m", 3_000, seed=1, layout="wikidata5m")
    w5m = load_wikidata5m(tmp_path / "w5m")
    assert w5m.n_relations <= 300 and len(w5m.splits["test"]) == counts["test"]
    assert np.all(w5m.splits["train"] >= 0) and w5m.notes["entities_without_alias"] == 0
    again = write_synthetic_kg(tmp_path / "again", 3_000, seed=1)
    assert again == counts and (tmp_path / "again" / "train.tsv").read_bytes() == (tmp_path / "tsv" / "train.tsv").read_bytes()
