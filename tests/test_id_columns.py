"""kg_data/id_columns.py: TSV id columns read in bulk, and where the bulk readers give up for the line readers."""

from __future__ import annotations

import pytest

from tests.kg_faults import _format_error


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
