"""The backend seam: the model-facing operations every probe needs, behind one interface.

``Backend`` states them with their units and shapes: ``encoder`` (PromptEOL states, LAMA's next-token
log-probs), ``statement_scorer`` (whole statements' summed log-likelihoods; PLL for a masked LM) and
``mask_filler`` (LAMA on a masked LM).  Every backend derives from ``ModelBackend``, which answers for
the model it runs (``max_positions``, ``is_masked_lm``, ``device``, ``output_size``, ``evaluation_mode()``,
``token_counts(texts)``): the rest of the toolkit asks the backend, never the model object.
``open_backend(name, model)`` has the backend class load the model (``ModelBackend.load``) and opens the backend on it.

Built in: ``hf`` (default: batched kernels, shared prefixes, prefix tries), ``plain`` (one whole
forward pass per prompt or statement: the equivalence tests' oracle) and ``vllm`` (vLLM's engines, causal LMs
only; the ``vllm`` extra).  Another package adds a backend (llama.cpp) through the ``deer.backends`` entry point group.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from importlib import metadata as importlib_metadata
from typing import Any, Protocol

from deer.base.errors import OptionError  # an unknown name is a bad option (--backend), not a KeyError

ENTRY_POINT_GROUP = "deer.backends"
BUILT_IN = {"hf": "deer.backends.hf:HFBackend", "plain": "deer.backends.plain:PlainBackend",
            "vllm": "deer.backends.vllm_backend:VLLMBackend"}
DEFAULT_BACKEND = "hf"


class Backend(Protocol):
    """What a probe may ask of a model (see the module docstring); ``ModelBackend`` gives the model facts."""

    name: str
    model: Any
    tokenizer: Any
    loaded: Any  # the LoadedModel it runs (identity: name, fingerprints, dtype, device)
    can_cache: bool  # its results may be stored and reused (False: a cross-check that reads and writes no store)
    store_key: dict  # what its vectors depend on beyond the model ({} where they are the model's own states)
    max_positions: int | None  # tokens one sequence may hold (None: the model states no limit)
    is_masked_lm: bool
    device: Any  # torch.device where its outputs are (DEER's vectors are ranked there)
    output_size: int  # the encoder's vector width

    def evaluation_mode(self) -> Any:
        """A context manager: the model runs as for probing inside (no dropout), as it was after."""
        ...

    def token_counts(self, texts: Sequence[str], special_tokens: str = "bos") -> list[int]:
        """Tokens of each text as the encoder feeds it (``special_tokens``: "bos" policy or "tokenizer")."""
        ...

    def encoder(self, special_tokens: str = "bos") -> Any:
        """A PromptEOL encoder: ``encode(texts, next_token_ids=None, description, progress, on_batch)`` gives an
        ``EncoderOutput`` whose ``embeddings`` are float32 (len(texts), hidden size), each prompt's last-layer
        state at its last token, in input order; with ``next_token_ids`` (ids), also ``next_token_logprobs``
        float32 (len(texts), len(ids)), log p(id | prompt) in nats.  ``on_batch(rows, vectors)``: each finished
        batch handed on instead of kept.  ``special_tokens``: "bos" (the BOS policy) or "tokenizer"."""
        ...

    def statement_scorer(self, pll_variant: str = "within_word_l2r") -> Any:
        """A statement scorer (``StatementScorer``'s interface): ``score(context, continuations)`` float64
        (len(continuations),) and ``score_statements(statements, progress)`` float64 (len(statements),): each
        whole statement's summed log-likelihood in nats, every token after the first (PLL with
        ``pll_variant`` for a masked LM); ``method``, ``statements_method`` and ``work()`` say how."""
        ...

    def mask_filler(self) -> Any:
        """A masked-token scorer for a masked LM (``deer.backends.mask_fill.MaskFiller``'s interface):
        ``logprobs(sentences, token_ids)``, float32 (len(sentences), len(token_ids)), log p(token | sentence)
        in nats at each sentence's one mask token (LAMA on a masked LM)."""
        ...


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
    """The backend class registered as ``name``; an unknown name is an OptionError listing the known ones."""
    if name in BUILT_IN or name in REGISTERED:
        module, attribute = {**BUILT_IN, **REGISTERED}[name].split(":")
        return getattr(import_module(module), attribute)
    for entry in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            return entry.load()
    raise OptionError("backend", name, f"unknown backend; known: {', '.join(backend_names())}")


def open_backend(name: str, model, *, tokenizer=None, dtype: str = "auto", device: str = "auto",
                 token_budget: int | None = None, show_progress: bool = True) -> Backend:
    """The backend ``name`` on ``model``, loaded by the backend class (``ModelBackend.load``: an alias, hub id,
    folder or ``ModelSpec`` with ``dtype`` and ``device``; a ``LoadedModel``, or a transformers model with its
    ``tokenizer``, as it is).  ``token_budget``: padded tokens per batch (None: the device's default for
    prompts, 512 for statements).  A backend class that does not derive from ``ModelBackend`` is refused by name."""
    from deer.backends.model_backend import ModelBackend

    cls = backend_class(name)
    if not (isinstance(cls, type) and issubclass(cls, ModelBackend)):
        raise OptionError("backend", name, "its class does not derive from deer.backends.ModelBackend, which answers for "
                                           "the model (positions, masked or causal, device, token counts)")
    loaded = cls.load(model, tokenizer, dtype=dtype, device=device)
    backend = cls(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=show_progress)
    backend.loaded = loaded
    return backend


def __getattr__(name: str):
    if name == "ModelBackend":  # imported on first use: it imports the kernels' modules, which import this package
        from deer.backends.model_backend import ModelBackend

        return ModelBackend
    raise AttributeError(name)
