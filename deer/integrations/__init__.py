"""DEER inside training loops: ``DeerCallback`` (Hugging Face Trainer) and ``probe_during_training``
(any loop).  Imported on first use, so ``import deer.integrations`` does not load transformers."""

from deer.lazy_exports import lazy_exports

_PUBLIC = dict.fromkeys(("DeerCallback", "probe_during_training", "logged_metrics"), "deer.integrations.training")
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
