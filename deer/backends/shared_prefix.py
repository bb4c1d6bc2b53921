"""Prompts that share a long token prefix (one few-shot block for every query): the prefix is run once (a 1-row
key/value cache), the tails packed side by side in rows on top of it, position ids continuing after the prefix.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from deer.backends.attention import backend_for_custom_masks, custom_attention_mask
from deer.backends.model_config import position_offset
from deer.backends.packing import consecutive_packs, packed_attention_mask

# Below this many shared tokens the prefix pass does not pay for its masks.
MIN_SHARED_TOKENS = 16
# Tokens of tails packed in one row: each attends over the pack, so packs stay short.
PACK_TOKENS = 512


def prefix_groups(id_lists: Sequence[Sequence[int]], min_shared: int = MIN_SHARED_TOKENS) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Prompts grouped by a shared token prefix: ([(shared length, member indices)], the others).  Sorted, a group
    is a run of two or more neighbours sharing at least T >= ``min_shared`` tokens, T chosen to save the most
    tokens; each member keeps a token of its own."""
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


def cache_keyword(model) -> str:
    """The keyword the model's forward takes its key/value cache by: ``cache`` from transformers 5.25 (which
    deprecates ``past_key_values``, to be removed in 5.40), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.base_model.forward).parameters else "past_key_values"


def context_cache(model, ids: Sequence[int]) -> tuple[torch.Tensor, DynamicCache]:
    """The base transformer's final hidden states (P, d) for one context row, and its key/value cache."""
    device = next(model.parameters()).device
    keyword = cache_keyword(model)
    output = model.base_model(input_ids=torch.as_tensor([list(ids)], device=device), use_cache=True, **{keyword: DynamicCache()})
    return output.last_hidden_state[0], output[keyword]  # item access: 5.25's past_key_values attribute warns


def forward_on_cache(model, cache, context_length: int, input_ids, positions: np.ndarray, allowed: np.ndarray) -> torch.Tensor:
    """Final hidden states (L, d) of one row on top of a context cache, which is left as it was; ``allowed``:
    bool (L, context_length + L), who may attend to whom."""
    device = next(model.parameters()).device
    key_positions = np.concatenate([np.arange(context_length), positions])
    hidden = model.base_model(input_ids=torch.as_tensor([list(input_ids)], device=device),
                              position_ids=torch.as_tensor(positions[None] + position_offset(model), device=device),
                              attention_mask=custom_attention_mask(model, allowed, positions, key_positions, device),
                              use_cache=True, **{cache_keyword(model): cache}).last_hidden_state[0]
    # Drop the row again so the next one sees only the context (negative = tokens to remove).
    cache.crop(context_length - cache.get_seq_length())
    return hidden


def packed_forward(model, cache, context_length: int, sequences: Sequence[Sequence[int]], starts: Sequence[int]) -> torch.Tensor:
    """Final hidden states of ``sequences`` packed in one row on the cache, sequence i after ``starts[i]`` context tokens."""
    widths = [len(ids) for ids in sequences]
    positions = np.concatenate([np.arange(w) + start for w, start in zip(widths, starts, strict=True)])
    allowed = packed_attention_mask(context_length, starts, widths)
    return forward_on_cache(model, cache, context_length, [t for ids in sequences for t in ids], positions, allowed)


def hidden_after_prefix(model, prefix: Sequence[int],
                        tails: Sequence[Sequence[int]]) -> Iterator[tuple[np.ndarray, torch.Tensor, int]]:
    """(tail indices, states at each tail's last token, tokens fed) per pack, after ``prefix`` once (counted first)."""
    length = len(prefix)
    with backend_for_custom_masks(model):
        _, cache = context_cache(model, prefix)
        prefix_fed = length
        widths = [len(ids) for ids in tails]
        for pack in consecutive_packs(widths, PACK_TOKENS):
            hidden = packed_forward(model, cache, length, [tails[i] for i in pack], [length] * len(pack))
            pack_widths = [widths[i] for i in pack]
            last = torch.as_tensor(np.cumsum(pack_widths) - 1, device=hidden.device)
            yield np.asarray(pack), hidden[last], prefix_fed + int(sum(pack_widths))
            prefix_fed = 0
