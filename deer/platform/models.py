"""The old name of ``deer.backends.models`` (model loading moved into the backend seam): ``import
deer.platform.models`` gives the same module object, with a DeprecationWarning.  Remove in 0.3."""

import importlib
import sys
import warnings

warnings.warn("deer.platform.models is now deer.backends.models; import from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("deer.backends.models")
