"""What every backend answers about the model it runs (``deer.backends.ModelBackend``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from deer.backends.encoder import output_size
from deer.backends.model_config import max_positions
from deer.backends.models import as_loaded_model, evaluation_mode, is_masked_lm
from deer.backends.tokenization import batch_token_ids


class ModelBackend:
    """The base of every backend: the model and tokenizer it runs and the facts about them (each documented in
    the ``deer.backends.Backend`` protocol).  A backend adds ``encoder``, ``statement_scorer``, ``mask_filler``, ``can_cache``
    (and ``store_key`` where it is not {}); ``loaded``, the ``LoadedModel`` it was opened on, is set by ``open_backend``."""

    name = ""
    can_cache = False
    store_key: dict = {}

    @classmethod
    def load(cls, model, tokenizer=None, dtype: str = "auto", device: str = "auto"):
        """The ``LoadedModel`` this backend runs (``open_backend`` calls it): a name loaded through transformers
        (``as_loaded_model``).  An engine that loads its own weights (vLLM, llama.cpp) overrides it and returns
        its own model object in the ``LoadedModel`` (the identity: name, fingerprints, dtype, device, tokenizer)."""
        return as_loaded_model(model, tokenizer, dtype=dtype, device=device)

    def __init__(self, model, tokenizer, token_budget: int | None = None, show_progress: bool = True):
        self.model, self.tokenizer, self.token_budget, self.show_progress = model, tokenizer, token_budget, show_progress
        self.loaded = None

    @property
    def max_positions(self) -> int | None:
        return max_positions(self.model)

    @property
    def is_masked_lm(self) -> bool:
        return is_masked_lm(self.model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def output_size(self) -> int:
        return output_size(self.model)

    def evaluation_mode(self):
        return evaluation_mode(self.model)

    def token_counts(self, texts: Sequence[str], special_tokens: str = "bos") -> list[int]:
        return [len(ids) for ids in batch_token_ids(self.tokenizer, texts, special_tokens)]
