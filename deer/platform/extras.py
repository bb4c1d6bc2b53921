"""Optional dependencies that serve one feature each (the package's extras).

``gguf`` converts the bundled GGUF models, ``plots`` (matplotlib) draws the experiments' figures.
Without them everything else works; the feature that needs one says which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

DISTRIBUTION = "deer-probe-toolkit"


class MissingExtraError(ImportError):
    """A feature's optional dependency is not installed; the message names the extra to install."""


def install_hint(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra_message(package: str, extra: str, feature: str) -> str:
    """One line: what needs ``package`` and how to install it."""
    return f"{feature} needs {package}, which is not installed: {install_hint(extra)}"


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (of an optional dependency) or raise :class:`MissingExtraError`.

    Only the absence of the package itself becomes the one-line message; an installed package
    that fails to import for another reason raises its own error.
    """
    package = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != package and not (error.name or "").startswith(package + "."):
            raise
        raise MissingExtraError(missing_extra_message(package, extra, feature)) from error
