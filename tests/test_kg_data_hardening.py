"""KG readers on hostile input: byte-order marks, UTF-16, JSONL value types, ambiguous files,
missing or empty splits and bad subset/seed arguments, each with a one-line message naming
the file and line (or the parameter)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kg_data import KGFormatError, KGSplitError, build_queries, load_kg
from kg_data.bear import load_bear_dataset
from kg_data.queries import sample_subset
from kg_data.textual import load_textual_kg
from kg_data.wn18rr import load_wn18rr
from tests.test_bear_dataset import write_dataset

BOM = b"\xef\xbb\xbf"


def _format_error(folder) -> KGFormatError:
    with pytest.raises(KGFormatError) as error:
        load_textual_kg(folder)
    assert type(error.value) is KGFormatError
    message = str(error.value)
    assert "\n" not in message and "\x00" not in message
    return error.value


def _jsonl_kg(folder, entities=None, relations=None, test=None):
    """A small JSONL KG; each argument replaces that file's records."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "entities": entities or [{"id": "a", "name": "alpha", "description": "first"}, {"id": "b", "name": "beta"}],
        "relations": relations or [{"id": "r", "name": "related to"}],
        "test": test or [{"head": "a", "relation": "r", "tail": "b"}],
    }
    for stem, records in files.items():
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder


# 1. UTF-8 byte-order mark


@pytest.mark.parametrize("file_name", ["entities.tsv", "relations.tsv", "test.tsv"])
def test_utf8_bom_is_stripped(tiny_kg_dir, tmp_path, file_name):
    plain = load_textual_kg(tiny_kg_dir)
    path = tiny_kg_dir / file_name
    path.write_bytes(BOM + path.read_bytes())
    with_bom = load_textual_kg(tiny_kg_dir)
    assert with_bom.entity_ids == plain.entity_ids and with_bom.relation_ids == plain.relation_ids
    assert with_bom.fingerprint() == plain.fingerprint()


@pytest.mark.parametrize(("file_name", "header"), [("entities.tsv", "id\tname\n"), ("entities.tsv", "ID\tName\tDescription\n"),
                                                 ("relations.tsv", "id\tname\n"), ("test.tsv", "head\trelation\ttail\n")])
def test_a_header_line_is_refused_not_read_as_data(tiny_kg_dir, file_name, header):
    """Issue 22.5: a header in entities.tsv became an entity 'id' named 'name' (29 candidates instead
    of 28, Hit@1 0.5 -> 0.4, no error); in a triples file it failed as an unknown entity 'head'."""
    path = tiny_kg_dir / file_name
    path.write_text(header + path.read_text())
    error = _format_error(tiny_kg_dir)
    assert str(error).startswith(f"{path}:1:") and "looks like a header line" in str(error) and "delete the line" in str(error)


def test_utf8_bom_in_jsonl_wn18rr_and_bear_metadata(tmp_path):
    folder = _jsonl_kg(tmp_path / "kg")
    plain = load_kg(folder).fingerprint()
    path = folder / "entities.jsonl"
    path.write_bytes(BOM + path.read_bytes())
    assert load_kg(folder).fingerprint() == plain

    wn = tmp_path / "wn"
    wn.mkdir()
    (wn / "entity2text.txt").write_bytes(BOM + b"00000001\tdog, a pet\n00000002\tanimal, a living thing\n")
    for file_name in ("train.tsv", "dev.tsv", "test.tsv"):
        (wn / file_name).write_text("00000001\t_hypernym\t00000002\n")
    assert load_wn18rr(wn).entity_ids == ["00000001", "00000002"]

    bear = write_dataset(tmp_path / "BEARmini")
    metadata = bear / "metadata_relations.json"
    metadata.write_bytes(BOM + metadata.read_bytes())
    assert list(load_bear_dataset(bear).relations) == ["P36", "P37"]


# 2. UTF-16 and NUL bytes


@pytest.mark.parametrize(
    "encoding, line, problem",
    [
        ("utf-16-le", 1, "looks like UTF-16 (NUL bytes); save the file as UTF-8"),
        ("utf-16-be", 1, "looks like UTF-16 (NUL bytes); save the file as UTF-8"),
        ("utf-16", 1, "starts with a UTF-16 byte-order mark (FF FE); save the file as UTF-8"),
    ],
)
def test_utf16_is_refused(tiny_kg_dir, encoding, line, problem):
    path = tiny_kg_dir / "entities.tsv"
    path.write_bytes(path.read_text().encode(encoding))
    error = _format_error(tiny_kg_dir)
    assert (error.path, error.line) == (str(path), line)
    assert str(error) == f"{path}:{line}: {problem}"


def test_utf16_big_endian_bom_is_named(tiny_kg_dir):
    path = tiny_kg_dir / "test.tsv"
    path.write_bytes(b"\xfe\xff" + "e6\tcapital_of\te7\n".encode("utf-16-be"))
    error = _format_error(tiny_kg_dir)
    assert str(error) == f"{path}:1: starts with a UTF-16 byte-order mark (FE FF); save the file as UTF-8"


def test_nul_byte_in_a_line_is_refused(tiny_kg_dir):
    path = tiny_kg_dir / "train.tsv"
    path.write_bytes(b"e0\t_hypernym\te3\n\ne1\t_hyper\x00nym\te3\n")
    error = _format_error(tiny_kg_dir)
    assert str(error) == f"{path}:3: looks like UTF-16 (NUL bytes); save the file as UTF-8"


def test_utf16_bear_metadata_is_refused(tmp_path):
    folder = write_dataset(tmp_path / "BEARmini")
    metadata = folder / "metadata_relations.json"
    metadata.write_bytes(metadata.read_text().encode("utf-16"))
    with pytest.raises(KGFormatError) as error:
        load_bear_dataset(folder)
    assert type(error.value) is KGFormatError and error.value.line == 1 and "UTF-16" in str(error.value)


# 3 and 8. JSONL value types, tabs and line breaks


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


# 4. ambiguous files


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


# 5. a split the KG does not have


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


# 6. an empty split used for queries


def test_empty_split_names_its_file(tiny_kg_dir):
    (tiny_kg_dir / "test.tsv").write_text("\n")
    kg = load_textual_kg(tiny_kg_dir)
    assert kg.split_files == {split: str(tiny_kg_dir / f"{split}.tsv") for split in ("train", "valid", "test")}
    assert len(kg.triples("test")) == 0  # loading an empty split is fine; probing it is not
    with pytest.raises(KGSplitError) as error:
        build_queries(kg, "test")
    assert type(error.value) is KGSplitError
    assert str(error.value) == f"{tiny_kg_dir / 'test.tsv'}: the test split has no triples; nothing to probe"


# 7. subset and seed


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"subset": 0}, "subset must be >= 1, got 0"),
        ({"subset": -3}, "subset must be >= 1, got -3"),
        ({"subset": 1.5}, "subset must be an integer >= 1, got 1.5"),
        ({"subset": True}, "subset must be an integer >= 1, got True"),
        ({"subset": "2"}, "subset must be an integer >= 1, got '2'"),
        ({"subset": 500}, "subset 500 is larger than the test split (4 triples)"),
        ({"subset": 2, "seed": -1}, "seed must be >= 0, got -1"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"subset": 2, "seed": 0.5}, "seed must be an integer >= 0, got 0.5"),
    ],
)
def test_subset_and_seed_checks(tiny_kg_dir, kwargs, message):
    kg = load_textual_kg(tiny_kg_dir)
    with pytest.raises(ValueError) as error:
        build_queries(kg, "test", **kwargs)
    assert type(error.value) is ValueError and str(error.value) == message


def test_subset_accepts_numpy_integers(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    assert len(sample_subset(kg, "test", np.int64(2), np.int64(3))) == 2
    assert len(build_queries(kg, "test", subset=4, seed=0)) == 4


# 9. the bulk entities reader (entities.tsv >= BULK_BYTES) refuses what the line reader refuses


@pytest.mark.parametrize(("first_line", "problem"), [
    ("id\tname\tdescription", "looks like a header line (id, name, description)"),
    ("x0\tdog\t\tan animal", "expected 2-3 tab-separated columns, found 4"),
    ("x0\tdog\tan animal\t", "expected 2-3 tab-separated columns, found 4"),
])
def test_bulk_entities_reader_refuses_a_header_or_a_fourth_column(tiny_kg_dir, monkeypatch, first_line, problem):
    """Audit E1: read in bulk, a header became an entity 'id' named 'name', and a fourth column was accepted (the
    description was trimmed before its tab was looked for); the line reader refuses both, naming file and line."""
    import kg_data.textual as textual
    from kg_data.id_columns import read_entity_texts

    path = tiny_kg_dir / "entities.tsv"
    path.write_text(first_line + "\n" + path.read_text())
    assert read_entity_texts(path, "-") is None
    monkeypatch.setattr(textual, "BULK_BYTES", 0)
    error = _format_error(tiny_kg_dir)
    assert str(error).startswith(f"{path}:1: {problem}")


# 10. a carriage return inside a TSV line (not before its newline)


@pytest.mark.parametrize("bulk", [False, True])
@pytest.mark.parametrize("file_name", ["entities.tsv", "test.tsv"])
def test_a_carriage_return_inside_a_tsv_line_is_refused(tiny_kg_dir, monkeypatch, bulk, file_name):
    """Audit E6: line by line a lone CR stayed inside a field (a name 'bad\\rname'; JSONL refuses one), read in bulk
    (pyarrow) it ended the line and made a bogus entity; both now refuse it, naming file and line.  CRLF stays fine."""
    import kg_data.kg as kg_module
    import kg_data.textual as textual

    if bulk:
        monkeypatch.setattr(textual, "BULK_BYTES", 0)
        monkeypatch.setattr(kg_module, "BULK_BYTES", 0)
    plain = load_textual_kg(tiny_kg_dir).fingerprint()
    for path in tiny_kg_dir.iterdir():
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert load_textual_kg(tiny_kg_dir).fingerprint() == plain
    path = tiny_kg_dir / file_name
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"\t", b"\r", 1) if file_name == "test.tsv" else lines[1].replace(b"t\t", b"t\rx\t", 1)
    path.write_bytes(b"".join(lines))
    error = _format_error(tiny_kg_dir)
    assert str(error).startswith(f"{path}:2: ") and "carriage return" in str(error)


def test_the_bulk_readers_give_up_on_a_lone_carriage_return(tmp_path, monkeypatch):
    """The byte scan behind the bulk readers finds a lone CR also across a block's end, and lets CRLF pass."""
    import pyarrow as pa

    from kg_data import id_columns

    monkeypatch.setattr(id_columns, "CR_SCAN_BYTES", 4)
    path = tmp_path / "lines.tsv"
    for data, lone in [(b"a\tb\r\nc\td\r\n", False), (b"abc\r\nd\te\n", False), (b"abc\rxd\te\n", True),
                       (b"ab\tc\r", False), (b"abc\r\r\nd\te\n", False), (b"a\tbc\rd\te\n", True), (b"abc\t\r\rd\n", True)]:
        path.write_bytes(data)
        assert id_columns.has_lone_carriage_return(path) is lone, data
    path.write_bytes(b"Q1\tP1\tQ2\rQ2\tP1\tQ1\n")
    ids = pa.array(["Q1", "Q2"])
    assert id_columns.index_triples(path, ids, pa.array(["P1"])) is None
    assert id_columns.read_columns(path, 3) is None and id_columns.read_entity_texts(path, "-") is None


def test_wikidata5m_refuses_a_carriage_return_inside_a_line(tmp_path):
    from kg_data.wikidata5m import load_wikidata5m
    from tests.test_wikidata5m import _write

    folder = _write(tmp_path / "w5m", **{"wikidata5m_text.txt": "Q1\tBerlin is\rthe capital.\nQ9\tUnused.\n"})
    with pytest.raises(KGFormatError, match=r"wikidata5m_text.txt:1: .*carriage return"):
        load_wikidata5m(folder)


# 11. a split file the loader does not read


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
