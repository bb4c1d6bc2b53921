"""LAMA on a masked LM: log p(token | sentence) at a sentence's one mask token, batched by padded tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from deer.backends.batching import length_sorted_batches, pad_right
from deer.backends.model_backend import MaskScoring
from deer.backends.tokenization import padding_id

DEFAULT_TOKEN_BUDGET = 4096  # padded tokens per batch of masked sentences when none is given


class MaskFiller(MaskScoring):
    """A backend's masked-token scorer: ``mask_fill_logprobs`` with ``token_budget`` padded tokens per pass."""

    def __init__(self, model, tokenizer, token_budget: int = DEFAULT_TOKEN_BUDGET):
        self.model, self.tokenizer, self.token_budget = model, tokenizer, token_budget

    def logprobs(self, sentences: Sequence[str], token_ids: np.ndarray) -> np.ndarray:
        return mask_fill_logprobs(self.model, self.tokenizer, sentences, token_ids, self.token_budget)


@torch.inference_mode()
def mask_fill_logprobs(model, tokenizer, sentences: Sequence[str], token_ids: np.ndarray,
                       token_budget: int = DEFAULT_TOKEN_BUDGET) -> np.ndarray:
    """float32 (n, len(token_ids)): log p(token | sentence) in nats at each sentence's one mask token."""
    encoded = tokenizer(list(sentences))["input_ids"]
    mask_id = tokenizer.mask_token_id
    for sentence, ids in zip(sentences, encoded, strict=True):
        if ids.count(mask_id) != 1:
            raise ValueError(f"expected exactly one mask token in {sentence!r}")
    device = next(model.parameters()).device
    out = np.zeros((len(sentences), len(token_ids)), dtype=np.float32)
    gather = torch.as_tensor(np.asarray(token_ids, dtype=np.int64), device=device)
    for batch in length_sorted_batches([len(ids) for ids in encoded], token_budget, 256):
        inputs, mask = pad_right([encoded[i] for i in batch], padding_id(tokenizer))
        inputs_t = torch.as_tensor(inputs, device=device)
        positions = (inputs_t == mask_id).nonzero()[:, 1]
        logits = model(input_ids=inputs_t, attention_mask=torch.as_tensor(mask, device=device)).logits
        rows = torch.arange(len(batch), device=device)
        out[batch] = torch.log_softmax(logits[rows, positions].float(), dim=-1)[:, gather].cpu().numpy()
    return out
