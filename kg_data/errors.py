"""Errors raised for malformed knowledge-graph files and for splits a KG cannot provide."""

from __future__ import annotations

import numbers
import warnings
from pathlib import Path


class KGFormatError(ValueError):
    """A data file is malformed; the message names the file, the line and the problem."""

    def __init__(self, path: str | Path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


def refuse_lone_surrogates(path: str | Path, line: int | None, text: str, what: str) -> str:
    """``text`` unchanged, or a KGFormatError if it holds a lone UTF-16 surrogate: a JSON escape such
    as "\\ud800" without its pair decodes to no character, which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        raise KGFormatError(path, line, f"{what} holds a lone surrogate (\\u{code:04x} at character {error.start}), "
                                        "which is no character: fix the JSON escape") from None
    return text


def some_of(names, limit: int = 20) -> str:
    """``names`` sorted and joined for a message, the first ``limit`` of them ('... and N more')."""
    names = sorted(map(str, names))
    return ", ".join(names[:limit]) + (f" ... and {len(names) - limit} more" if len(names) > limit else "")


def integer_problem(value, minimum: int) -> str | None:
    """What is wrong with ``value`` as a whole count >= ``minimum`` (None: nothing): the one integer rule of the
    toolkit, numpy's integers included, a bool not (True is no count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return f"must be an integer >= {minimum}"
    return f"must be >= {minimum}" if value < minimum else None


def check_integer(name: str, value, minimum: int, hint: str = "") -> None:
    """ValueError naming ``name`` unless ``value`` is an integer (numpy's too; not a bool) >= ``minimum``."""
    problem = integer_problem(value, minimum)
    if problem is not None:
        shown = value if isinstance(value, numbers.Integral) and not isinstance(value, bool) else repr(value)
        raise ValueError(f"{name} {problem}, got {shown}{hint}")


class KGNotFoundError(FileNotFoundError):
    """A knowledge graph could not be found; the message lists where we looked."""


class KGSplitError(ValueError):
    """A requested split is missing from the KG, or has no triples to probe."""


class DeerWarning(UserWarning):
    """Something ran differently from what was asked (fewer few-shot examples, rows a reader dropped, ...).  Defined
    here, at the bottom of the imports, so that the data readers can say so too; ``deer.platform.validate`` exports it."""


def warn(message: str) -> None:
    """A ``DeerWarning`` pointing at the caller's caller (the CLI shows it as a 'Warning: ...' line)."""
    warnings.warn(message, DeerWarning, stacklevel=3)
