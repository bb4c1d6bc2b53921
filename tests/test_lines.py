"""kg_data/lines.py: how the readers read a line (byte-order marks, encodings, NUL bytes, carriage returns, header lines), through each reader."""

from __future__ import annotations

import pytest

from kg_data import KGFormatError, load_kg
from kg_data.bear import load_bear_dataset
from kg_data.textual import load_textual_kg
from kg_data.wn18rr import load_wn18rr
from tests.benchmark_folders import write_dataset
from tests.kg_faults import _format_error, _jsonl_kg

BOM = b"\xef\xbb\xbf"


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
