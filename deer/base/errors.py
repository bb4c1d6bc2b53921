"""The error every option check raises; a module of its own so that any core module can raise it."""

from __future__ import annotations


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
