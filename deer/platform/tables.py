"""The one markdown table writer and number formatter behind every summary.md, table.md and printed table."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd


def format_number(value, spec: str | None = None, digits: int = 4) -> str:
    """A cell's text: None and NaN as '-'; a number with ``spec`` where given, else a float to ``digits`` significant
    digits (scientific below 1e-3 and from 1e6); anything else as text with '|' escaped."""
    if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
        return "-"
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if spec is not None:
            return format(value, spec)
        if isinstance(value, (float, np.floating)):
            return f"{value:.{digits - 1}e}" if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3) else f"{value:.{digits}g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(table: pd.DataFrame | Sequence[Mapping], formats: Mapping[str, str] | None = None, digits: int = 4) -> str:
    """A GitHub-flavoured markdown table of a frame or of rows (dicts); ``formats``: a format spec per column."""
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    formats = formats or {}
    columns = [str(c) for c in frame.columns]
    aligns = ["---:" if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) else "---"
              for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(aligns) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(format_number(v, formats.get(c), digits) for c, v in zip(columns, row, strict=True)) + " |")
    return "\n".join(lines) + "\n"


def text_table(rows: Sequence, columns: Sequence[tuple]) -> str:
    """A fixed-width text table (no final newline).  ``columns``: (title, spec[, get[, text]]) each; ``spec`` the
    cell's format spec ('>8.3f'), placing the title too; ``get`` a row's key (default: the title in lower case) or
    a function of the row; ``text`` a function giving the value's text.  None shows as '-'."""

    def cell(row, title, spec, get=None, text=None):
        value = get(row) if callable(get) else row[get or title.lower()]
        if text is not None:
            return format(text(value), width(spec))
        return format("-", width(spec)) if value is None else format(value, spec)

    def width(spec):
        return re.match(r"[<>^]?\d*", spec).group()

    lines = ["".join(format(title, width(spec)) for title, spec, *_ in columns)]
    return "\n".join(lines + ["".join(cell(row, *column) for column in columns) for row in rows])
