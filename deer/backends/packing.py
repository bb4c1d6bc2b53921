"""Several sequences in one row after a shared context: which go together, and who sees whom.

Used wherever many short sequences follow one context (BEAR's candidate continuations after a
query, DEER's query tails after a shared few-shot block): the context is run once (a 1-row
key/value cache), the sequences are laid side by side in one row on top of it, and a
block-diagonal causal mask (turned into what the model's attention back-end needs by
``deer.backends.attention.custom_attention_mask``) keeps them apart, so nothing is padded and the
context cache is never copied.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def consecutive_packs(widths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive groups of items whose widths sum to at most ``token_budget`` (at least one item)."""
    packs: list[list[int]] = []
    current: list[int] = []
    used = 0
    for k, width in enumerate(widths):
        if current and used + width > token_budget:
            packs.append(current)
            current, used = [], 0
        current.append(k)
        used += width
    if current:
        packs.append(current)
    return packs


def packed_attention_mask(context_length: int, shared_lengths: Sequence[int], widths: Sequence[int]) -> np.ndarray:
    """Boolean (L, P + L) pattern for continuations packed in one row after a P-token context.

    Token j of continuation i sees the first ``shared_lengths[i]`` context positions and
    tokens 0..j of its own continuation, nothing of the others (True = may attend).
    ``deer.backends.attention.custom_attention_mask`` turns it into what the model's back-end needs.
    """
    total = int(sum(widths))
    owner = np.repeat(np.arange(len(widths)), widths)
    offset = np.concatenate([np.arange(w) for w in widths]) if total else np.zeros(0, dtype=np.int64)
    mask = np.zeros((total, context_length + total), dtype=bool)
    mask[:, :context_length] = np.arange(context_length)[None, :] < np.asarray(shared_lengths)[owner][:, None]
    same = owner[:, None] == owner[None, :]
    causal = offset[None, :] <= offset[:, None]
    mask[:, context_length:] = same & causal
    return mask
