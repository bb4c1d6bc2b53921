"""Optional dependencies that serve one feature each (the package's extras, e.g. ``gguf``, ``plots``);
the feature that needs one says which extra to install."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

DISTRIBUTION = "deer-probe-toolkit"


class MissingExtraError(ImportError):
    """A feature's optional dependency is not installed; the message names the extra to install."""


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or :class:`MissingExtraError` where its package itself is absent."""
    package = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != package and not (error.name or "").startswith(package + "."):
            raise
        raise _missing(package, extra, feature) from error


def require_extra(module: str, extra: str, feature: str) -> None:
    """:class:`MissingExtraError` now, before any work, when ``module`` is not installed (looked up, not imported)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
        found = False
    if not found:
        raise _missing(module.split(".")[0], extra, feature)


def _missing(package: str, extra: str, feature: str) -> MissingExtraError:
    return MissingExtraError(f"{feature} needs {package}, which is not installed: pip install '{DISTRIBUTION}[{extra}]'")
