"""Line-by-line reading of text data files with errors that point at file:line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from kg_data.errors import KGFormatError


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without the newline); skip blank lines.

    Decoding happens per line so that a bad byte is reported with its line number.
    """
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise KGFormatError(path, number, f"not valid UTF-8 ({error.reason} at byte {error.start})") from None
            text = text.rstrip("\r\n")
            if text.strip():
                yield number, text


def read_tsv(path: Path, n_columns: int, min_columns: int | None = None) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) for a tab-separated file, checking the column count."""
    min_columns = n_columns if min_columns is None else min_columns
    for number, text in read_lines(path):
        fields = text.split("\t")
        if not min_columns <= len(fields) <= n_columns:
            expected = n_columns if min_columns == n_columns else f"{min_columns}-{n_columns}"
            raise KGFormatError(path, number, f"expected {expected} tab-separated columns, found {len(fields)}")
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
