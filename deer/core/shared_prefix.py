"""Prompts that share a long token prefix: the prefix is run once, only the tails after it.

With one few-shot block for every query (``--shots shared``, the authors' template style), ~95
of a query prompt's ~108 tokens are the same for every query.  The prefix is run once (a 1-row
key/value cache); the prompts' own tails are then laid side by side in rows on top of it
(``deer.core.packing``), each seeing the whole prefix and its own earlier tokens, with position
ids continuing after the prefix -- exactly what a whole forward pass per prompt computes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from deer.core.attention import backend_for_custom_masks, custom_attention_mask
from deer.core.packing import consecutive_packs, packed_attention_mask

# Below this many shared tokens the prefix pass does not pay for its masks.
MIN_SHARED_TOKENS = 16
# Tokens of tails packed in one row: each attends over the pack, so packs stay short.
PACK_TOKENS = 512


def common_prefix_length(id_lists: Sequence[Sequence[int]]) -> int:
    """Tokens every list starts with, leaving each list at least one token of its own."""
    if not id_lists:
        return 0
    first = np.asarray(id_lists[0])
    shared = min(len(ids) for ids in id_lists) - 1
    for ids in id_lists[1:]:
        if shared <= 0:
            return 0
        head = np.asarray(ids[:shared])
        differ = np.flatnonzero(head != first[:shared])
        if len(differ):
            shared = int(differ[0])
    return max(shared, 0)


def hidden_after_prefix(model, prefix: Sequence[int], tails: Sequence[Sequence[int]],
                        pack_tokens: int = PACK_TOKENS) -> Iterator[tuple[np.ndarray, torch.Tensor, int]]:
    """Yield (tail indices, last-layer states at each tail's last token (k, d), tokens fed) per
    pack, after running ``prefix`` once; the first pack's count includes the prefix.

    The model's base transformer only (no LM head); a back-end that honours custom masks.
    """
    device = next(model.parameters()).device
    base = model.base_model
    length = len(prefix)
    with backend_for_custom_masks(model):
        cache = base(input_ids=torch.as_tensor([list(prefix)], device=device), past_key_values=DynamicCache(),
                     use_cache=True).past_key_values
        prefix_fed = length
        widths = [len(ids) for ids in tails]
        for pack in consecutive_packs(widths, pack_tokens):
            pack_widths = [widths[i] for i in pack]
            positions = np.concatenate([np.arange(w) + length for w in pack_widths])
            mask = custom_attention_mask(model, packed_attention_mask(length, [length] * len(pack), pack_widths), positions,
                                         np.concatenate([np.arange(length), positions]), device)
            hidden = base(
                input_ids=torch.as_tensor([[t for i in pack for t in tails[i]]], device=device),
                position_ids=torch.as_tensor(positions[None], device=device),
                attention_mask=mask,
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state[0]
            cache.crop(length - cache.get_seq_length())  # drop the pack (negative: tokens to remove)
            last = torch.as_tensor(np.cumsum(pack_widths) - 1, device=device)
            yield np.asarray(pack), hidden[last], prefix_fed + int(sum(pack_widths))
            prefix_fed = 0
