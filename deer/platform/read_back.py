"""Checked readers for what a run reads back from disk.  A bad file of the toolkit's own cache (store and resume
parts) is named in a ``DeerWarning``, set aside (``<name>.bad``) and its work done again; a bad file in a run
folder, a user's input, is refused with a ``StoredFileError`` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from deer.base.files import read_table, read_table_and_digest, table_digest
from deer.platform.validate import warn
from kg_data.task import shorten

BAD_SUFFIX = ".bad"


class StoredFileError(ValueError):
    """A file read back that cannot be trusted; the message names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")


def set_aside(error: StoredFileError, redo: str) -> None:
    """Rename the bad file to ``<name>.bad`` and say so in a DeerWarning, with ``redo``: what is done again."""
    target = error.path.with_name(error.path.name + BAD_SUFFIX)
    try:
        os.replace(error.path, target)
        kept = f"set aside as {target.name}"
    except FileNotFoundError:  # another process reading the same store set it aside first, or it is simply missing
        kept = f"set aside as {target.name} by another run" if target.exists() else "no file to set aside"
    except OSError as failure:  # still never used by this run; a later one tries again
        kept = f"not used (it could not be set aside: {failure.strerror or failure})"
    warn(f"{error}; {kept}, {redo}")


def _parse_failure(path: Path, what: str, error: Exception) -> StoredFileError:
    """The reader's error in one line (the path, already in front, shortened to the file's name)."""
    text = shorten(" ".join(str(error).replace(str(path), path.name).split()), 200)
    return StoredFileError(path, f"not a readable {what} ({type(error).__name__}{': ' + text if text else ''})")


def read_json_object(path: Path) -> dict:
    """A JSON file that must hold an object; StoredFileError naming it otherwise."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise _parse_failure(path, "JSON file", error) from None
    if not isinstance(value, dict):
        raise StoredFileError(path, f"holds a JSON {type(value).__name__}, not an object")
    return value


def read_stored_table(path: Path, columns: Sequence[str] = (), rows: int | None = None, digest: bool = False) -> pd.DataFrame:
    """A table (parquet or CSV) holding ``columns`` and, if given, ``rows`` rows; StoredFileError naming it otherwise.
    ``digest``: it must also record the digest of its content as written (``write_table(..., digest=True)``) and
    match it, so a table that is still valid but not what was written (a value edited) is refused too."""
    path = Path(path)
    try:
        table, recorded = read_table_and_digest(path) if digest else (read_table(path), None)
    except Exception as error:  # whatever a damaged file raises (ArrowInvalid, OSError, ParserError, ...)
        raise _parse_failure(path, "table", error) from None
    missing = [column for column in columns if column not in table.columns]
    if missing:
        raise StoredFileError(path, f"lacks the column(s) {', '.join(missing)}")
    if rows is not None and len(table) != rows:
        raise StoredFileError(path, f"holds {len(table)} rows where {rows} are expected")
    if digest:
        _check_digest(path, table, recorded)
    return table


def _check_digest(path: Path, table: pd.DataFrame, recorded: str | None) -> None:
    """StoredFileError naming ``path`` unless ``table`` (read from it) has the content digest the file records."""
    if recorded is None:
        raise StoredFileError(path, "records no digest of its content (not written by this toolkit version, or rewritten "
                                    "since), so it cannot be told from an edited table")
    if recorded != table_digest(table):
        raise StoredFileError(path, "its content is not what was written (its values do not match the digest it records: "
                                    "changed since it was written)")


def reusable_table(path: Path, columns: Sequence[str], rows: int, redo: str) -> pd.DataFrame | None:
    """A stored resume part to reuse (written by ``write_table(..., digest=True)``), checked whole and against its
    content digest; None if there is none or it is bad (then set aside, saying ``redo``)."""
    if not Path(path).exists():
        return None
    try:
        return read_stored_table(path, columns, rows, digest=True)
    except StoredFileError as error:
        set_aside(error, redo)
        return None
