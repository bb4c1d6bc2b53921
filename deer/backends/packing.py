"""Several sequences side by side in one row after a shared context, kept apart by a block-diagonal causal
mask: nothing is padded and the context cache is never copied."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def consecutive_packs(widths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive groups of items whose widths sum to at most ``token_budget`` (at least one item)."""
    packs: list[list[int]] = []
    used = 0
    for k, width in enumerate(widths):
        if not packs or used + width > token_budget:
            packs.append([])
            used = 0
        packs[-1].append(k)
        used += width
    return packs


def packed_attention_mask(context_length: int, shared_lengths: Sequence[int], widths: Sequence[int]) -> np.ndarray:
    """Boolean (L, P + L), True = may attend: token j of continuation i sees the first ``shared_lengths[i]``
    context positions and tokens 0..j of its own continuation."""
    total = int(sum(widths))
    owner = np.repeat(np.arange(len(widths)), widths)
    offset = np.concatenate([np.arange(w) for w in widths]) if total else np.zeros(0, dtype=np.int64)
    mask = np.zeros((total, context_length + total), dtype=bool)
    mask[:, :context_length] = np.arange(context_length)[None, :] < np.asarray(shared_lengths)[owner][:, None]
    same = owner[:, None] == owner[None, :]
    causal = offset[None, :] <= offset[:, None]
    mask[:, context_length:] = same & causal
    return mask
