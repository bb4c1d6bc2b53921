"""The plain reference: one full forward pass per whole statement, as lm-pub-quiz scores.

Written for clarity, not speed; tests prove the shared-prefix scorer equal to it, and the
benchmark measures it on a sample.  The continuation's tokens are found independently of
``deer.backends.boundary``: from the tokenizer's character offsets, every token from the first
one that touches the continuation's text to the end (lm-pub-quiz's conditional score).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from deer.backends.batching import pad_right
from deer.backends.boundary import move_trailing_whitespace
from deer.backends.tokenization import bos_id, padding_id
from deer.core.work import WorkCounter


def statement_ids_and_start(tokenizer, context: str, continuation: str) -> tuple[list[int], int]:
    """(BOS + tokens of the whole statement, index of its first continuation token)."""
    context, continuation = move_trailing_whitespace(context, continuation)
    text = context + continuation
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoded["input_ids"]), encoded["offset_mapping"]
    boundary = len(context)
    # First token whose character span ends inside the continuation text.
    start = next(i for i, (_, end) in enumerate(offsets) if end > boundary)
    bos = bos_id(tokenizer)
    if bos is not None:
        ids, start = [bos, *ids], start + 1
    return ids, start


@torch.inference_mode()
def plain_conditional_scores(
    model, tokenizer, context: str, continuations: Sequence[str], batch_size: int = 8, stats: WorkCounter | None = None
) -> np.ndarray:
    """Summed log p of each statement's continuation tokens from a full pass: float64 (n,)."""
    device = next(model.parameters()).device
    pad = padding_id(tokenizer)
    statements = [statement_ids_and_start(tokenizer, context, c) for c in continuations]
    scores = np.zeros(len(statements), dtype=np.float64)
    for first in range(0, len(statements), batch_size):
        chunk = statements[first : first + batch_size]
        inputs, mask = pad_right([ids for ids, _ in chunk], pad)
        stats = stats if stats is not None else WorkCounter()
        with stats.forward():
            # The model's forward already soft-caps its logits (Gemma): nothing to add here.
            logits = model(input_ids=torch.as_tensor(inputs, device=device), attention_mask=torch.as_tensor(mask, device=device)).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            for row, (ids, start) in enumerate(chunk):
                positions = torch.arange(start, len(ids))
                targets = torch.as_tensor(ids[start:], device=device)
                scores[first + row] = float(logprobs[row, positions - 1, targets].double().sum())
        stats.add(statements=len(chunk), tokens=int(mask.sum()), padded_tokens=int(mask.size))
    return scores
