"""Tab-separated id columns read in bulk (pyarrow), for KGs of millions of triples, where the line-by-line readers
(``kg_data.lines``) cost a Python string per id.  Anything unusual makes the fast path give up (None), so the caller reads
the file line by line and names the problem.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from kg_data.lines import is_header

NO_DELIMITER = "\x1f"  # a byte that no text file here holds: read a line as one column
TRIPLE_BLOCK_BYTES = 1 << 26  # a triples file read 64 MiB at a time: a few lookups, each hashing every entity id, at 20M triples
CR_SCAN_BYTES = 1 << 24  # the scan for a lone carriage return reads 16 MiB at a time
# a CR followed by neither CR nor LF: pyarrow ends a line there, the line reader keeps it in a field
LONE_CR = re.compile(rb"\r(?![\r\n])")


def has_lone_carriage_return(path: Path) -> bool:
    """Whether the file holds a carriage return that does not end its line (``LONE_CR``), a block at a time; a run
    of CRs at the file's end ends its last line."""
    carry = b""
    with open(path, "rb") as handle:
        while block := handle.read(CR_SCAN_BYTES):
            block = carry + block if carry else block
            if b"\r" not in block:
                carry = b""
                continue
            kept = block.rstrip(b"\r")  # CRs at the block's end: judged with the next block's first byte
            carry = block[len(kept):]
            if LONE_CR.search(kept):
                return True
    return False


def _plain_options(names: list[str], delimiter: str, block_size: int = 1 << 24, column_type: pa.DataType | None = None) -> dict:
    """pyarrow.csv options for plain lines: no quotes or escapes, every column a non-null string."""
    return {"read_options": pcsv.ReadOptions(column_names=names, block_size=block_size),
            "parse_options": pcsv.ParseOptions(delimiter=delimiter, quote_char=False, double_quote=False, escape_char=False,
                                               newlines_in_values=False),
            "convert_options": pcsv.ConvertOptions(column_types=dict.fromkeys(names, column_type or pa.string()),
                                                   strings_can_be_null=False)}


def read_columns(path: Path, n_columns: int | None) -> pa.Table | None:
    """The file's tab-separated columns (``n_columns`` None: each line whole); None when pyarrow cannot read it plainly."""
    names = [f"c{i}" for i in range(n_columns or 1)]
    if has_lone_carriage_return(path):
        return None
    try:
        return pcsv.read_csv(path, **_plain_options(names, "\t" if n_columns else NO_DELIMITER))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None


def split_first(lines: pa.ChunkedArray, separator: str = "\t") -> tuple[pa.Array, pa.Array]:
    """Each line cut at its first ``separator``: (first field, the rest; '' where there is none)."""
    first = pc.list_element(pc.split_pattern(lines, separator, max_splits=1), 0)
    rest = pc.replace_substring_regex(lines, f"^[^{separator}]*{separator}?", "", max_replacements=1)
    return first, rest


def indices_in(values: pa.ChunkedArray | pa.Array, vocabulary: pa.Array) -> np.ndarray:
    """Each value's position in ``vocabulary`` (int64), -1 where it is not there."""
    found = pc.index_in(values.cast(vocabulary.type), value_set=vocabulary)
    return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def index_triples(path: Path, entity_ids: pa.Array, relation_ids: pa.Array) -> np.ndarray | None:
    """(n, 3) int64 indices of a triples file, a block at a time; None when any line is not a plain triple of known ids."""
    if has_lone_carriage_return(path):
        return None
    try:
        parts = []
        for batch in pcsv.open_csv(path, **_plain_options(["head", "relation", "tail"], "\t", TRIPLE_BLOCK_BYTES)):
            # heads and tails in one lookup: ``index_in`` hashes its whole vocabulary on every call
            ends = indices_in(pa.chunked_array([batch.column(0), batch.column(2)]), entity_ids)
            part = np.stack([ends[:batch.num_rows], indices_in(batch.column(1), relation_ids), ends[batch.num_rows:]], axis=1)
            if (part < 0).any():
                return None
            parts.append(part)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    finally:
        pa.default_memory_pool().release_unused()  # the parsed text: back to the system, not kept by the pool
    return np.concatenate(parts) if parts else np.zeros((0, 3), np.int64)


def read_entity_texts(path: Path, empty_description: str) -> tuple | None:
    """(ids, names, descriptions) as ``TextColumn``s of a large ``entities.tsv``, stripped, a block at a time; None when
    any line is not plain (a BOM, a NUL, an empty id or name, a repeated id, a fourth column, a header, a lone CR)."""
    from kg_data.text_column import TextColumn

    if has_lone_carriage_return(path):
        return None
    columns: tuple[list, list, list] = ([], [], [])
    try:
        for batch in pcsv.open_csv(path, **_plain_options(["line"], NO_DELIMITER, column_type=pa.large_string())):
            lines = batch.column(0)
            if pc.any(pc.match_substring(lines, "\x00")).as_py() or (not columns[0] and lines[0].as_py().startswith("\ufeff")):
                return None
            if not columns[0] and is_header(lines[0].as_py().split("\t")):  # as read_tsv refuses it
                return None
            ids, rest = split_first(lines)
            names, descriptions = split_first(rest)
            if pc.any(pc.match_substring(descriptions, "\t")).as_py():  # a fourth column (looked for before trimming)
                return None
            ids, names, descriptions = (pc.utf8_trim_whitespace(column) for column in (ids, names, descriptions))
            if pc.any(pc.equal(ids, "")).as_py() or pc.any(pc.equal(names, "")).as_py():
                return None
            for kept, column in zip(columns, (ids, names, pc.if_else(pc.equal(descriptions, ""), empty_description,
                                                                   descriptions)), strict=True):
                kept.append(column)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if not columns[0]:
        return None
    texts = tuple(TextColumn(pa.chunked_array(kept, pa.large_string())) for kept in columns)
    del columns
    pa.default_memory_pool().release_unused()
    return texts if pc.count_distinct(texts[0].array).as_py() == len(texts[0]) else None
