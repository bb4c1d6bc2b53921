"""Optional dependencies that serve one feature each (the package's extras, e.g. ``gguf``, ``plots``);
the feature that needs one says which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

DISTRIBUTION = "deer-probe-toolkit"


class MissingExtraError(ImportError):
    """A feature's optional dependency is not installed; the message names the extra to install."""


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (of an optional dependency) or raise :class:`MissingExtraError` when the package
    itself is absent (an installed package failing to import for another reason raises its own error)."""
    package = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != package and not (error.name or "").startswith(package + "."):
            raise
        hint = f"pip install '{DISTRIBUTION}[{extra}]'"
        raise MissingExtraError(f"{feature} needs {package}, which is not installed: {hint}") from error
