"""What every backend answers about the model it runs: the runner, the length guard and the probes ask
the backend, never the model object (``deer.backends.ModelBackend``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from deer.backends.encoder import output_size
from deer.backends.model_config import max_positions
from deer.backends.models import as_loaded_model, evaluation_mode, is_masked_lm
from deer.backends.tokenization import batch_token_ids


class ModelBackend:
    """The base of every backend: the model and tokenizer it runs and the facts about them that the rest of
    the toolkit needs.  A backend adds ``encoder``, ``statement_scorer`` and ``mask_filler`` (the
    ``deer.backends.Backend`` protocol) and says whether it can cache (``can_cache``) and what its
    vectors depend on beyond the model (``store_key``).  ``loaded``: the ``LoadedModel`` it was opened on
    (its identity: name, fingerprints, dtype, device), set by ``open_backend``."""

    name = ""
    can_cache = False
    store_key: dict = {}

    @classmethod
    def load(cls, model, tokenizer=None, dtype: str = "auto", device: str = "auto"):
        """The ``LoadedModel`` this backend runs (``open_backend`` calls it): an alias, hub id, folder or
        ``ModelSpec`` loaded with ``dtype`` on ``device`` through Hugging Face transformers; a ``LoadedModel``
        or a transformers model (with its ``tokenizer``) taken as it is.  An engine that loads its own
        weights (vLLM, llama.cpp) overrides it and returns its own model object in the ``LoadedModel``
        (the identity: name, fingerprints, dtype, device, tokenizer)."""
        return as_loaded_model(model, tokenizer, dtype=dtype, device=device)

    def __init__(self, model, tokenizer, token_budget: int | None = None, show_progress: bool = True):
        self.model, self.tokenizer, self.token_budget, self.show_progress = model, tokenizer, token_budget, show_progress
        self.loaded = None

    @property
    def max_positions(self) -> int | None:
        """The most tokens one sequence may hold (the model config's position limit; None if it states none)."""
        return max_positions(self.model)

    @property
    def is_masked_lm(self) -> bool:
        """Whether the model is a masked LM (PLL and mask filling) rather than a causal one."""
        return is_masked_lm(self.model)

    @property
    def device(self) -> torch.device:
        """Where the model's outputs are: DEER's vectors are ranked there."""
        return next(self.model.parameters()).device

    @property
    def output_size(self) -> int:
        """The width of the encoder's vectors (the model's hidden size)."""
        return output_size(self.model)

    def evaluation_mode(self):
        """A context in which the model runs as for probing (no dropout); a model that was training trains again after."""
        return evaluation_mode(self.model)

    def token_counts(self, texts: Sequence[str], special_tokens: str = "bos") -> list[int]:
        """Tokens of each text as the encoder feeds it (``special_tokens``: the BOS policy, or the tokenizer's own)."""
        return [len(ids) for ids in batch_token_ids(self.tokenizer, texts, special_tokens)]
