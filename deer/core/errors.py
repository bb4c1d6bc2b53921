"""The error every option check raises; a module of its own so that any core module can raise it."""

from __future__ import annotations


class OptionError(ValueError):
    """An argument (CLI option) has a value that cannot work; ``option`` is its Python name."""

    def __init__(self, option: str, value, problem: str):
        self.option, self.value, self.problem = option, value, problem
        super().__init__(f"{option}={value!r}: {problem}")

    def cli_message(self) -> str:
        """The same, naming the command-line option: ``--k-shot -1: must be >= 0``."""
        return f"--{self.option.replace('_', '-')} {self.value}: {self.problem}"
