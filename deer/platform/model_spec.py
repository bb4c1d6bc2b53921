"""The old name of ``deer.base.model_spec`` (the ground floor moved out of the platform): ``import
deer.platform.model_spec`` gives the same module object, with a DeprecationWarning.  Remove in 0.3."""

import importlib
import sys
import warnings

warnings.warn("deer.platform.model_spec is now deer.base.model_spec; import from there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("deer.base.model_spec")
