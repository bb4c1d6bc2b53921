"""What a backend running a transformers (torch) model answers about it: the ``hf`` and ``plain`` backends' base."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from deer.backends.encoder import output_size
from deer.backends.model_backend import ModelBackend
from deer.backends.model_config import max_positions
from deer.backends.models import as_loaded_model, evaluation_mode, is_masked_lm
from deer.backends.tokenization import batch_token_ids


class TransformersBackend(ModelBackend):
    """A backend whose model is a transformers ``PreTrainedModel`` on a torch device, loaded through transformers
    (``as_loaded_model``); the facts come from the model object and its config."""

    @classmethod
    def load(cls, model, tokenizer=None, dtype: str = "auto", device: str = "auto"):
        return as_loaded_model(model, tokenizer, dtype=dtype, device=device)

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
