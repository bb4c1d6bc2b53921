"""Package-root names imported on first use (PEP 562), so `import deer` and the CLI stay fast."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(namespace: dict, public: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for a package (globals ``namespace``) exporting ``public`` ({name: module}) lazily."""

    def __getattr__(name: str):
        if name in public:
            namespace[name] = getattr(import_module(public[name]), name)
            return namespace[name]
        raise AttributeError(f"module '{namespace['__name__']}' has no attribute '{name}'")

    def __dir__() -> list[str]:
        return sorted(list(namespace) + list(public))

    return __getattr__, __dir__
