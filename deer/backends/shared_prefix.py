"""Prompts that share a long token prefix: the prefix is run once, only the tails after it.

With one few-shot block for every query (``--shots shared``, the authors' template style), ~95
of a query prompt's ~108 tokens are the same for every query (a few queries get another block:
prompts are grouped by their shared prefix, ``prefix_groups``).  The prefix is run once (a 1-row
key/value cache); the prompts' own tails are then laid side by side in rows on top of it
(``deer.backends.packing``), each seeing the whole prefix and its own earlier tokens, with position
ids continuing after the prefix -- exactly what a whole forward pass per prompt computes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from deer.backends.attention import backend_for_custom_masks, custom_attention_mask
from deer.backends.packing import consecutive_packs, packed_attention_mask

# Below this many shared tokens the prefix pass does not pay for its masks.
MIN_SHARED_TOKENS = 16
# Tokens of tails packed in one row: each attends over the pack, so packs stay short.
PACK_TOKENS = 512


def prefix_groups(id_lists: Sequence[Sequence[int]], min_shared: int = MIN_SHARED_TOKENS) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Prompts grouped by a shared token prefix: ([(shared length, member indices)], the others).

    Most queries share one few-shot block, but a query whose (head, relation) occurs among the
    examples gets another block, so there are a few groups.  Sorted lexicographically, a group
    is a run of neighbours sharing at least T tokens (a sorted run's common prefix is the least of
    its neighbours' ones); T is chosen among those values to save the most tokens.  Groups share
    at least ``min_shared`` tokens and have two members or more; each member keeps a token of its own.
    """
    n = len(id_lists)
    if n < 2:
        return [], np.arange(n)
    order = np.asarray(sorted(range(n), key=lambda i: list(id_lists[i])), dtype=np.int64)
    lengths = np.asarray([len(id_lists[i]) for i in order], dtype=np.int64)
    width = int(lengths.max())
    matrix = np.full((n, width), -1, dtype=np.int64)
    for row, i in enumerate(order):
        matrix[row, : lengths[row]] = id_lists[i]
    differs = matrix[:-1] != matrix[1:]
    first_difference = np.where(differs.any(axis=1), differs.argmax(axis=1), width)
    # shared tokens of neighbours, each keeping one token of its own
    adjacent = np.minimum(first_difference, np.minimum(lengths[:-1], lengths[1:]) - 1)

    def runs(threshold: int) -> list[tuple[int, int, int]]:
        """(first row, last row, shared) of each run of neighbours sharing >= threshold tokens."""
        found, start = [], None
        for k, value in enumerate(np.append(adjacent, -1)):
            if value >= threshold and start is None:
                start = k
            elif value < threshold and start is not None:
                found.append((start, k, int(adjacent[start:k].min())))
                start = None
        return found

    candidates = np.unique(adjacent[adjacent >= min_shared])
    if not len(candidates):
        return [], np.arange(n)
    # Evaluate a spread of thresholds (all of them when few): the saving is (members - 1) x shared.
    thresholds = candidates if len(candidates) <= 64 else np.quantile(candidates, np.linspace(0, 1, 64)).astype(np.int64)
    best = max((sum((last - first) * shared for first, last, shared in runs(int(t))), int(t)) for t in thresholds)[1]
    groups = [(shared, np.sort(order[first : last + 1])) for first, last, shared in runs(best)]
    grouped = np.zeros(n, dtype=bool)
    for _, members in groups:
        grouped[members] = True
    return groups, np.flatnonzero(~grouped)


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
