"""The old name of ``deer.base.files`` (the ground floor moved out of the platform): ``import
deer.platform.files`` gives the same module object, with a DeprecationWarning.  Remove in 0.3."""

import importlib
import sys
import warnings

warnings.warn("deer.platform.files is now deer.base.files; import from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("deer.base.files")
