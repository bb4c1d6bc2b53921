"""The old name of ``deer.base.errors`` (the ground floor moved out of the platform): ``import
deer.platform.errors`` gives the same module object, with a DeprecationWarning.  Remove in 0.3."""

import importlib
import sys
import warnings

warnings.warn("deer.platform.errors is now deer.base.errors; import from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("deer.base.errors")
