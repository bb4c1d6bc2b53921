"""The error every option check raises, and the checks of an argument's type that raise it; a module of its own so that
any core module can use them.

One rule per kind of value, everywhere in the API: an option's value of the wrong type is an ``OptionError`` naming
the option and what it takes (``check_flag``, ``check_count``, ``check_text``, ``check_path``, ``check_mapping``); an
argument that is an object (a KG, a model, an option object) of no accepted type is a ``TypeError`` naming it
(``wrong_type``, ``check_instance``).
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Mapping

from kg_data.errors import integer_problem


class OptionError(ValueError):
    """An argument (CLI option) has a value that cannot work; ``option`` is its Python name."""

    def __init__(self, option: str, value, problem: str):
        self.option, self.value, self.problem = option, value, problem
        super().__init__(f"{option}={value!r}: {problem}")

    CLI_SPELLINGS = {"model_kwargs": "--model-arg"}  # Python keywords whose option is not --<keyword>

    def cli_message(self) -> str:
        """The same, naming the command-line option: ``--k-shot -1: must be >= 0``."""
        option = self.CLI_SPELLINGS.get(self.option, f"--{self.option.replace('_', '-')}")
        return f"{option} {self.value}: {self.problem}"


def wrong_type(argument: str, value, accepted: str) -> TypeError:
    """The error for an argument of a type nothing accepts, naming it (pathlib's own error names neither)."""
    return TypeError(f"{argument} must be {accepted}; got {type(value).__name__} {reprlib.repr(value)}")


def check_instance(argument: str, value, kind: type | tuple, accepted: str = "", allow_none: bool = True):
    """``value`` if it is a ``kind`` (or None where ``allow_none``), else ``wrong_type``: a dict for an option
    object would fail later on a missing attribute, naming nothing."""
    if (value is None and allow_none) or isinstance(value, kind):
        return value
    raise wrong_type(argument, value, accepted or f"a {kind.__name__}{' or None' if allow_none else ''}")


def _or_none(text: str, allow_none: bool) -> str:
    return f"{text} or None" if allow_none else text


def check_flag(option: str, value, allow_none: bool = False):
    """``value`` as a bool (numpy's too), or an OptionError: bool("no") is True, so a text or number is refused."""
    if value is None and allow_none:
        return None
    if type(value).__name__ not in ("bool", "bool_"):  # numpy's bool, without importing numpy here
        raise OptionError(option, value, "must be True, False or None" if allow_none else "must be True or False")
    return bool(value)


def check_count(option: str, value, minimum: int, allow_none: bool = False):
    """``value`` as an int >= ``minimum`` (numpy's integers too, not a bool; None where ``allow_none``), or an
    OptionError naming ``option``.  The rule is kg_data's (``integer_problem``), so the data readers agree."""
    if value is None and allow_none:
        return None
    problem = integer_problem(value, minimum)
    if problem is not None:
        raise OptionError(option, value, problem)
    return int(value)


def check_text(option: str, value, choices=(), allow_none: bool = False):
    """``value``, a str (one of ``choices`` where given; None where ``allow_none``), or an OptionError."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or (choices and value not in choices):
        wanted = f"one of {', '.join(choices)}" if choices else "a text"
        raise OptionError(option, value, f"must be {_or_none(wanted, allow_none)}")
    return value


def check_path(option: str, value, allow_none: bool = True):
    """``value``, a str or os.PathLike (None where ``allow_none``), or an OptionError."""
    if (value is None and allow_none) or isinstance(value, (str, os.PathLike)):
        return value
    raise OptionError(option, value, f"must be {_or_none('a folder (str or Path)', allow_none)}")


def check_mapping(option: str, value, allow_none: bool = True):
    """``value``, a mapping of str keys (None where ``allow_none``), or an OptionError."""
    if value is None and allow_none:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise OptionError(option, value, f"must be {_or_none('a mapping of names to values (a dict)', allow_none)}")
    return value


def check_names(option: str, value, allow_none: bool = True):
    """``value``, a list or tuple of texts (relation codes, modes; None where ``allow_none``), or an OptionError: a single
    text would be read letter by letter."""
    if value is None and allow_none:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise OptionError(option, value, f"must be {_or_none('a list of texts', allow_none)}")
    return value
