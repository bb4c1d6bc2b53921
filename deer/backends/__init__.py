"""The backend seam: the model-facing operations every probe needs, behind one contract, and the registry.

``deer.backends.model_backend`` states the contract (``ModelBackend``: the engine's facts and three workers, each
with its shapes and units); ``deer.backends.transformers_backend`` answers the facts for a transformers model.
``open_backend(name, model)`` has the backend class load the model (``ModelBackend.load``) and opens the backend on
it: every model the toolkit probes is loaded there, and the run functions take the opened backend.

Built in: ``hf`` (default: batched kernels, shared prefixes, prefix tries), ``plain`` (one whole forward pass per
prompt or statement: the equivalence tests' oracle) and ``vllm`` (vLLM's engines, causal LMs only; the ``vllm``
extra).  Another package adds a backend (llama.cpp) through the ``deer.backends`` entry point group.
"""

from __future__ import annotations

from importlib import import_module
from importlib import metadata as importlib_metadata

from deer.backends.model_backend import ModelBackend, missing_members
from deer.base.errors import (  # an unknown name is a bad option (--backend), not a KeyError
    OptionError,
    check_count,
    check_flag,
    check_text,
)

ENTRY_POINT_GROUP = "deer.backends"
BUILT_IN = {"hf": "deer.backends.hf:HFBackend", "plain": "deer.backends.plain:PlainBackend",
            "vllm": "deer.backends.vllm_backend:VLLMBackend"}
DEFAULT_BACKEND = "hf"
Backend = ModelBackend  # the contract's name in 0.1's docs and type hints


REGISTERED: dict[str, str] = {}  # backends registered at run time (``register_backend``): name -> "module:Class"


def register_backend(name: str, target: str) -> None:
    """Make ``target`` ("module:Class") the backend ``name`` for this process, as an entry point would
    (a benchmark's or a test's own backend, without installing a package)."""
    REGISTERED[name] = target


def backend_names() -> list[str]:
    """The built-in backends, then those registered at run time, then those other packages registered."""
    extra = sorted(e.name for e in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP) if e.name not in BUILT_IN)
    return [*BUILT_IN, *(name for name in REGISTERED if name not in BUILT_IN), *(name for name in extra if name not in REGISTERED)]


def can_cache(name: str) -> bool:
    """Whether the backend's results may be stored and reused (``can_cache`` on its class)."""
    return bool(getattr(backend_class(name), "can_cache", False))


def refuse_cache_on(name: str, cache) -> None:
    """``cache=True`` on a backend that cannot cache is an OptionError: a user would wait on a resume that never comes."""
    if cache and not can_cache(name):
        raise OptionError("cache", cache, f"the {name} backend cannot cache (it reads and writes no store): use cache=False "
                                          "(--no-cache), or a backend that can")


def cache_unless(no_cache: bool, name: str) -> bool:
    """The command line's default: cache (unless --no-cache) on every backend that can."""
    return not no_cache and can_cache(name)


def backend_class(name: str):
    """The backend class registered as ``name``, checked whole: an unknown name, a class not deriving from
    ``ModelBackend`` or one leaving a member of the contract out is an OptionError, before any model loads."""
    check_text("backend", name, allow_none=False)
    if name in BUILT_IN or name in REGISTERED:
        module, attribute = {**BUILT_IN, **REGISTERED}[name].split(":")
        cls = getattr(import_module(module), attribute)
    else:
        cls = next((entry.load() for entry in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP) if entry.name == name),
                   None)
        if cls is None:
            raise OptionError("backend", name, f"unknown backend; known: {', '.join(backend_names())}")
    if not (isinstance(cls, type) and issubclass(cls, ModelBackend)):
        raise OptionError("backend", name, "its class does not derive from deer.backends.ModelBackend, the backend contract")
    if missing_members(cls):  # refused when chosen, before any model loads, not when a run first calls the member
        raise OptionError("backend", name, f"{cls.__name__} leaves out {', '.join(missing_members(cls))} of the backend "
                                           "contract (deer.backends.model_backend.ModelBackend)")
    return cls


def open_backend(name: str, model, *, tokenizer=None, dtype: str = "auto", device: str = "auto",
                 token_budget: int | None = None, show_progress: bool = True) -> ModelBackend:
    """The backend ``name`` on ``model``, loaded by the backend class (``ModelBackend.load``: an alias, hub id,
    folder or ``ModelSpec`` with ``dtype`` and ``device``; a ``LoadedModel``, or a transformers model with its
    ``tokenizer``, as it is).  ``token_budget``: padded tokens per batch (None: the device's default for
    prompts, 512 for statements).  A backend class that breaks the contract is refused by name (``backend_class``)."""
    cls = backend_class(name)
    check_count("token_budget", token_budget, 1, allow_none=True)
    check_flag("show_progress", show_progress)
    loaded = cls.load(model, tokenizer, dtype=dtype, device=device)
    backend = cls(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=show_progress)
    backend.loaded = loaded
    return backend


def backend_name_for(model, backend: str | None) -> str:
    """The backend a run uses: ``backend``; for a model given as an opened backend, its own (another name is refused);
    else the default (hf)."""
    if isinstance(model, ModelBackend):
        if backend is not None and backend != model.name:
            raise OptionError("backend", backend, f"the model given is a {model.name} backend opened already: leave backend "
                                                  f"out (or name {model.name!r})")
        return model.name
    return DEFAULT_BACKEND if backend is None else backend


def as_backend(model, backend: str | None = None, *, tokenizer=None, dtype: str = "auto", device: str = "auto",
               token_budget: int | None = None, show_progress: bool = True) -> ModelBackend:
    """What a run function probes: ``model`` opened on ``backend`` (``open_backend``; None: hf), or a backend opened
    already, as it is.  For an opened one, what would change its loading is refused by name (its tokenizer, another
    dtype or device, another token budget: it was opened with them); ``show_progress`` applies to this run."""
    name = backend_name_for(model, backend)
    if not isinstance(model, ModelBackend):
        return open_backend(name, model, tokenizer=tokenizer, dtype=dtype, device=device, token_budget=token_budget,
                            show_progress=show_progress)
    from deer.backends.models import as_loaded_model

    check_flag("show_progress", show_progress)
    if tokenizer is not None:
        raise OptionError("tokenizer", type(tokenizer).__name__, f"the {name} backend given is opened already, on its own "
                                                                  "tokenizer: leave tokenizer out")
    if token_budget is not None and token_budget != model.token_budget:
        raise OptionError("token_budget", token_budget, f"the {name} backend given was opened with token_budget="
                                                        f"{model.token_budget}: give it to open_backend, or leave it out here")
    as_loaded_model(model.loaded, dtype=dtype, device=device)  # another dtype or device: refused as for a loaded model
    model.show_progress = show_progress
    return model

