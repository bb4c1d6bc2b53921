"""The old name of ``deer.platform``: ``import deer.core.X`` still works and gives ``deer.platform.X`` (or,
for a module that has left the platform since 0.1, its new home: ``MOVED``), the same module object, with a
DeprecationWarning.  Remove in 0.3."""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

OLD, NEW = "deer.core.", "deer.platform."
# 0.1's deer.core modules that have since left the platform (the ground floor, model loading): their homes now
MOVED = {"models": "deer.backends.models", **{name: f"deer.base.{name}" for name in ("errors", "work", "files", "extras", "model_spec")}}


class _Renamed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name.startswith(OLD) else None

    def create_module(self, spec):
        old = spec.name[len(OLD):]
        return importlib.import_module(MOVED.get(old, NEW + old))

    def exec_module(self, module):
        pass  # already executed under its new name


if not any(isinstance(finder, _Renamed) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Renamed())
warnings.warn("deer.core is now deer.platform; import from there", DeprecationWarning, stacklevel=2)
