"""Line-by-line reading of text data files with errors that point at file:line."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from kg_data.errors import KGFormatError, refuse_lone_surrogates

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = {b"\xff\xfe": "FF FE", b"\xfe\xff": "FE FF"}
UTF16 = "looks like UTF-16 (NUL bytes); save the file as UTF-8"
JSON_TYPE_NAMES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
SNIFF_BYTES = 1 << 16  # the head of a file looked at to name what it is when it is not text
# (its first bytes, what the file is, how to get the text out of it): a download saved or renamed without being unpacked;
# bzip2's "BZh" is followed by a digit and a block's magic (or the empty stream's), which no text holds
PACKED = ((rb"\x1f\x8b", "gzip-compressed", "gzip -dc FILE > OUT; a .tar.gz archive: tar -xzf FILE"),
          (rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)", "bzip2-compressed", "bzip2 -dc FILE > OUT; a .tar.bz2 archive: tar -xjf FILE"),
          (rb"\xfd7zXZ\x00", "xz-compressed", "xz -dc FILE > OUT; a .tar.xz archive: tar -xJf FILE"),
          (rb"\x28\xb5\x2f\xfd", "zstd-compressed", "zstd -dc FILE > OUT; a .tar.zst archive: tar --zstd -xf FILE"),
          (rb"PK\x03\x04", "a zip archive", "unzip FILE"), (rb"PK\x05\x06", "an empty zip archive", "unzip FILE"),
          (rb"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "7z x FILE"))
TAR_MAGIC_AT = 257  # a tar archive's header holds "ustar" here


def check_text_file(path: Path, *, empty_ok: bool = True) -> None:
    """Refuse a file whose bytes are not UTF-8 text, naming what they are instead: compressed or archived (with how to
    unpack it), UTF-16 (a byte-order mark, or NUL bytes in every other place), binary, or (unless ``empty_ok``) empty.
    Every text reader calls it first, so a file is named for what it is, not for the first line it cannot read."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    if not head.strip() and len(head) < SNIFF_BYTES:
        if not empty_ok:
            raise KGFormatError(path, None, "empty file (0 bytes)" if not head else "holds only blank lines, no data")
        return
    for magic, what, unpack in PACKED:
        if re.match(magic, head):
            raise KGFormatError(path, None, f"is {what}, not text: decompress it ({unpack}) and give the text file it holds")
    if head[TAR_MAGIC_AT:TAR_MAGIC_AT + 5] == b"ustar":
        raise KGFormatError(path, None, "is a tar archive, not text: extract it (tar -xf FILE) and give the text file it holds")
    if head[:2] in UTF16_BOMS:
        raise KGFormatError(path, 1, f"starts with a UTF-16 byte-order mark ({UTF16_BOMS[head[:2]]}); save the file as UTF-8")
    if b"\x00" in head:
        _refuse_nul_bytes(path, head)


def _refuse_nul_bytes(path: Path, head: bytes) -> None:
    """UTF-16 (NULs in every other byte of ASCII text) or binary data (NULs and bytes that are not UTF-8); a stray NUL in
    UTF-8 text is left to the line reader, which names its line."""
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if max(even, odd) > len(head) // 8 and min(even, odd) < max(even, odd) // 8:  # NULs on one side only
        raise KGFormatError(path, 1, UTF16)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 3:  # not merely a character cut at the end of the head
            raise KGFormatError(path, None, "is binary data (NUL bytes, bytes that are not UTF-8), not a text file") from None


def _decoded_lines(path: Path, empty_ok: bool = True) -> Iterator[tuple[int, str]]:
    """(1-based line number, text with its newline) of a UTF-8 file (``check_text_file``), decoded per line so that a
    bad byte is reported with its line; a UTF-8 byte-order mark is dropped."""
    check_text_file(path, empty_ok=empty_ok)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM):]
            if b"\x00" in raw:
                raise KGFormatError(path, number, UTF16)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise KGFormatError(path, number, f"not valid UTF-8 ({error.reason} at byte {error.start})") from None
            yield number, text


def read_text(path: Path) -> str:
    """The whole file as text, with the same encoding rules (and errors) as ``read_lines``; an empty file is refused (a
    JSON document holds something)."""
    return "".join(text for _, text in _decoded_lines(path, empty_ok=False))


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without the newline); skip blank lines."""
    for number, text in _decoded_lines(path):
        text = text.rstrip("\r\n")
        if text.strip():
            yield number, text


# Column names a header line would hold: the KG files have none, and a header read as data would
# become an entity "id" named "name" (one more candidate, every Hit@k shifted, no error).
HEADER_WORDS = {"id", "name", "description", "desc", "label", "entity", "entity_id", "relation", "relation_id", "head",
                "head_id", "tail", "tail_id", "subject", "predicate", "object", "h", "r", "t", "text"}


def is_header(fields: list[str]) -> bool:
    """Whether a line's ``fields`` are only column names (``HEADER_WORDS``)."""
    return all(field.strip().lower() in HEADER_WORDS for field in fields)


def read_tsv(path: Path, n_columns: int, min_columns: int | None = None) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a tab-separated file, checked: column count, no header line, no CR inside a line."""
    min_columns = n_columns if min_columns is None else min_columns
    for index, (number, text) in enumerate(read_lines(path)):
        if "\r" in text:  # a bulk (pyarrow) reader would end the line there
            column = text[:text.index("\r")].count("\t") + 1
            raise KGFormatError(path, number, f"column {column} holds a carriage return (\\r) inside the line; remove it "
                                              "(a line may end with LF or CRLF only)")
        fields = text.split("\t")
        if not min_columns <= len(fields) <= n_columns:
            expected = n_columns if min_columns == n_columns else f"{min_columns}-{n_columns}"
            raise KGFormatError(path, number, f"expected {expected} tab-separated columns, found {len(fields)}")
        if index == 0 and is_header(fields):
            raise KGFormatError(path, number, f"looks like a header line ({', '.join(fields)}); the file has no header: "
                                              "delete the line")
        yield number, fields


def read_jsonl(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for a JSON-lines file, checking required keys."""
    for number, text in read_lines(path):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise KGFormatError(path, number, f"invalid JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise KGFormatError(path, number, "expected a JSON object")
        missing = [key for key in required if key not in record]
        if missing:
            raise KGFormatError(path, number, f"missing key(s): {', '.join(missing)}")
        yield number, record


def nonempty(rows: Iterable[tuple], path: Path, what: str) -> Iterator[tuple]:
    """``rows`` as they come; KGFormatError 'PATH: no WHAT' when there are none (not an unknown id later)."""
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        raise KGFormatError(path, None, f"no {what}")


def read_rows(path: Path, *keys: str) -> Iterator[tuple]:
    """(path, line, *values) per row of a KG file (``kg_data.textual``): the JSONL ``keys`` or the TSV columns in that order.
    Ids may be integers, a name must be a string; a description may be null or missing (TSV: an absent last column)."""
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, tuple(key for key in keys if key != "description")):
            yield (path, line, *(json_text(path, line, record, key, integer=key not in ("name", "description"),
                                           optional=key == "description") for key in keys))
    else:
        for line, fields in read_tsv(path, len(keys), min_columns=len(keys) - 1 if "description" in keys else len(keys)):
            yield (path, line, *fields, *[""] * (len(keys) - len(fields)))


def json_text(path: Path, line: int, record: dict, key: str, *, integer: bool = False, optional: bool = False) -> str:
    """``record[key]`` checked as text: a string, with ``integer`` an integer (as its decimal string), with
    ``optional`` null or missing (as ""); tabs, line breaks and lone surrogates are refused."""
    value = record.get(key)
    if optional and value is None:
        return ""
    if integer and type(value) is int:
        value = str(value)
    if not isinstance(value, str):
        allowed = "a string or an integer" if integer else "a string or null" if optional else "a string"
        got = JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        raise KGFormatError(path, line, f"key '{key}' must be {allowed}, got {got}")
    if any(c in value for c in "\t\n\r"):
        raise KGFormatError(path, line, f"key '{key}' must not contain a tab or line break")
    return refuse_lone_surrogates(path, line, value, f"key '{key}'")  # else it fails only when a tokenizer meets it
