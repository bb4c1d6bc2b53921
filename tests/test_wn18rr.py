"""kg_data/wn18rr.py: WN18RR in KG-BERT's layout, and the folders of that layout that are not WN18RR."""

from __future__ import annotations

import pytest

from kg_data import KGFormatError, load_kg
from tests.kg_faults import _wn18rr_format


def test_a_kg_bert_folder_of_freebase_ids_is_not_read_as_wn18rr(tmp_path):
    """Any folder holding entity2text.txt was read as WN18RR: a KG-BERT FB15k-237 folder loaded as "wn18rr", its names cut
    at ", " ("Washington" described as "D.C."); its Freebase ids are refused, naming the file and line."""
    fb = tmp_path / "fb15k-237"
    fb.mkdir()
    (fb / "entity2text.txt").write_text("/m/0rh6k\tWashington, D.C.\n/m/09c7w0\tUnited States of America\n")
    for file_name in ("train.tsv", "dev.tsv", "test.tsv"):
        (fb / file_name).write_text("/m/0rh6k\t/location/location/contains\t/m/09c7w0\n")
    with pytest.raises(KGFormatError, match=r"entity2text\.txt:1: id '/m/0rh6k' is not a WordNet synset offset"):
        load_kg(fb)


@pytest.mark.parametrize("first_id", ["1", "123", "260881", "002608810"])
def test_a_kg_bert_folder_of_plain_ids_is_not_read_as_wn18rr(tmp_path, first_id):
    """A user's KG in the KG-BERT layout with plain ids (1, 2, 3) was read as WN18RR: named "wn18rr", "Paris, Texas" and
    "Paris, France" both named "Paris" (cut at WordNet's ", "), relation2text.txt ignored; only 8-digit synset offsets
    are read as WN18RR, any other id is refused, naming the file and line."""
    kg = tmp_path / "my_kg"
    kg.mkdir()
    (kg / "entity2text.txt").write_text(f"{first_id}\tParis, Texas\n2\tParis, France\n3\tFrance\n")
    (kg / "relation2text.txt").write_text("P17\tcountry\n")
    for file_name in ("train.tsv", "dev.tsv", "test.tsv"):
        (kg / file_name).write_text("2\tP17\t3\n")
    with pytest.raises(KGFormatError, match=rf"entity2text\.txt:1: id '{first_id}' is not a WordNet synset offset"):
        load_kg(kg)


def test_a_kg_bert_folder_of_eight_digit_ids_with_its_own_relation_names_is_not_read_as_wn18rr(tmp_path):
    """A user's KG-BERT-layout folder whose ids happen to be 8 digits passed the synset-offset check and was read as WN18RR
    ("Paris, Texas" named "Paris", relation P17 named "P17", not relation2text.txt's "country"); a relation2text.txt name
    other than its id's, as WN18RR's all are, is refused naming the file and line."""
    kg = tmp_path / "my_kg"
    kg.mkdir()
    (kg / "entity2text.txt").write_text("10000001\tParis, Texas\n10000002\tParis, France\n10000003\tFrance\n")
    (kg / "relation2text.txt").write_text("P17\tcountry\n")
    for file_name in ("train.tsv", "dev.tsv", "test.tsv"):
        (kg / file_name).write_text("10000002\tP17\t10000003\n")
    with pytest.raises(KGFormatError, match=r"relation2text\.txt:1: relation 'P17' is named 'country'.* not WN18RR"):
        load_kg(kg)
    (kg / "relation2text.txt").write_text("P17\tP17\n")  # named as its id: nothing tells this folder from WN18RR's layout
    assert list(load_kg(kg).relation_names) == ["P17"]


def test_empty_wn18rr_entity_file_is_named(tmp_path):
    from kg_data.wn18rr import load_wn18rr

    folder = _wn18rr_format(tmp_path) / "wn18rr"
    (folder / "entity2text.txt").write_text("")
    with pytest.raises(KGFormatError, match=r"entity2text.txt: no entities"):
        load_wn18rr(folder)
