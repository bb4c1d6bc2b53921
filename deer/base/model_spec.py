"""A model name with its loading options, as lm-evaluation-harness's ``--model_args`` gives them:
``ModelSpec("org/model", model_kwargs={...}, adapter="lora/")`` is the name ``"org/model"`` wherever a
name is used, and its options are part of the model's fingerprint (``loading_suffix``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from deer.base.errors import OptionError, check_mapping, check_path, check_text
from deer.base.extras import require_extra

RESERVED = {"dtype": "dtype (--dtype)", "torch_dtype": "dtype (--dtype)", "device_map": "device (--device)",
            "device": "device (--device)"}
SOURCE_KWARGS = ("trust_remote_code", "revision", "token", "local_files_only", "subfolder")
ADAPTER_CONFIG = "adapter_config.json"


class ModelSpec(str):
    """A model name (alias, hub id or folder) carrying ``model_kwargs`` and an ``adapter``."""

    model_kwargs: dict
    adapter: str | None

    def __new__(cls, name, model_kwargs: Mapping | None = None, adapter=None):
        spec = super().__new__(cls, str(name))
        spec.model_kwargs = dict(model_kwargs or {})
        spec.adapter = None if adapter is None else str(adapter)
        return spec

    def __reduce__(self):  # Ray tasks and worker processes get the options too
        return ModelSpec, (str(self), self.model_kwargs, self.adapter)

    def __repr__(self) -> str:
        return f"ModelSpec({str(self)!r}, model_kwargs={self.model_kwargs!r}, adapter={self.adapter!r})"


def check_loading(dtype="auto", device="auto", model_kwargs=None, adapter=None) -> None:
    """The loading options' types, each named: dtype a text, device a text or torch.device, model_kwargs a mapping,
    adapter a folder or hub id (their values are checked where the model is named: ``deer.platform.validate``)."""
    check_text("dtype", dtype)
    if not isinstance(device, str) and type(device).__module__ != "torch":  # torch.device(...), without importing torch
        raise OptionError("device", device, "must be a text (auto, cpu, cuda, cuda:N or mps) or a torch.device")
    check_mapping("model_kwargs", model_kwargs)
    check_path("adapter", adapter)


def with_loading(model, model_kwargs: Mapping | None = None, adapter=None):
    """``model`` with these loading options (a ``ModelSpec``), or as it is when there are none (only a name takes them)."""
    check_mapping("model_kwargs", model_kwargs)  # a list would pass as falsy here, or fail in dict() naming nothing
    check_path("adapter", adapter)
    if not model_kwargs and adapter is None:
        return model
    if not isinstance(model, (str, os.PathLike)):
        option = "model_kwargs" if model_kwargs else "adapter"
        raise OptionError(option, model_kwargs or adapter, f"applies to a model given by name; {type(model).__name__} is loaded already")
    base = getattr(model, "model_kwargs", {})
    return ModelSpec(model, {**base, **(model_kwargs or {})}, adapter if adapter is not None else getattr(model, "adapter", None))


def loading_options(name) -> tuple[dict, str | None]:
    """(model_kwargs, adapter) of a name, checked: reserved keys and a second revision are refused."""
    kwargs, adapter = dict(getattr(name, "model_kwargs", {})), getattr(name, "adapter", None)
    for key in kwargs:
        if key in RESERVED:
            raise OptionError("model_kwargs", f"{key}={kwargs[key]!r}", f"the {RESERVED[key]} has its own option; set it there")
    if "revision" in kwargs and "@" in str(name):
        raise OptionError("model_kwargs", f"revision={kwargs['revision']!r}", f"{name} names its revision after '@' already")
    return kwargs, adapter


def check_adapter(adapter) -> None:
    """Before any model loads: the adapter a PEFT folder or a hub id (cached, when offline), then peft installed.
    The folder comes first: a wrong path is the user's first problem, and installing peft would not fix it."""
    if adapter is None:
        return
    path, text = Path(adapter).expanduser(), str(adapter)
    if path.exists():
        if not (path / ADAPTER_CONFIG).is_file():
            raise OptionError("adapter", text, f"not a PEFT adapter folder (no {ADAPTER_CONFIG} in it)")
    elif text.startswith((".", "~")) or not HUB_ID.fullmatch(text):  # a path (./a, a/b/c, /a) is no hub id: a missing folder
        raise OptionError("adapter", text, "no such adapter folder")
    elif not _hub_has(text):
        raise OptionError("adapter", text, "no such adapter folder, nor a hub adapter in the local hub cache "
                                           "(offline: HF_HUB_OFFLINE is set)")
    require_extra("peft", "peft", f"--adapter {adapter}")


HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def _hub_has(repo_id: str) -> bool:
    """True online (the hub is asked when loading), else whether the hub cache holds the adapter's config."""
    from huggingface_hub import constants, try_to_load_from_cache

    return not constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(repo_id, ADAPTER_CONFIG), str)


def loading_suffix(model_kwargs: Mapping) -> str:
    """What the loading options add to a weights fingerprint ('' for none)."""
    if not model_kwargs:
        return ""
    text = json.dumps(model_kwargs, sort_keys=True, default=str)
    return "+args-" + hashlib.sha256(text.encode()).hexdigest()[:10]
