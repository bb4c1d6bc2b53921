"""Group variable-length inputs into batches under a token budget, longest first (little padding;
the caller scatters results back to input order, as sentence-transformers' ``encode`` does)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from deer.backends.model_config import text_config


def length_sorted_batches(
    lengths: Sequence[int], token_budget: int, max_batch_size: int = 256, max_padding: float = 0.1
) -> list[np.ndarray]:
    """Index arrays, longest first, each a batch whose padded size (rows x longest) fits ``token_budget`` and
    whose padding stays within ``max_padding`` of it (an input longer than the budget: a batch of its own)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        rows_limit = max(1, min(max_batch_size, token_budget // longest))
        end, real = start + 1, int(lengths[order[start]])
        while end < len(order) and end - start < rows_limit:
            candidate_real = real + int(lengths[order[end]])
            if 1 - candidate_real / (longest * (end - start + 1)) > max_padding:
                break
            real, end = candidate_real, end + 1
        batches.append(order[start:end])
        start = end
    return batches


def pad_right(id_lists: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token lists (real tokens keep their position ids): (input_ids, attention_mask), int64 (n, longest)."""
    longest = max(len(ids) for ids in id_lists)
    input_ids = np.full((len(id_lists), longest), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(id_lists), longest), dtype=np.int64)
    for row, ids in enumerate(id_lists):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return input_ids, attention_mask


CPU_TOKEN_BUDGET = 1024  # padded tokens per batch on the CPU: activations stay in cache (benchmarks/bench_token_budget.py)
GPU_MEMORY_SHARE = 0.25  # of the free device memory, for one batch's activations


def auto_batch_limits(model) -> tuple[int, int]:
    """(token budget, max rows) for a batch on the model's device: the CPU defaults, or what a share of a GPU's free
    memory holds at a conservative ``dtype bytes x (8 x hidden + 3 x intermediate)`` per token."""
    import torch

    parameter = next(model.parameters())
    if parameter.device.type != "cuda":
        return CPU_TOKEN_BUDGET, 128
    config = text_config(model)
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 1024))
    intermediate = int(getattr(config, "intermediate_size", 0) or getattr(config, "ffn_dim", 0) or 4 * hidden)
    free, _ = torch.cuda.mem_get_info(parameter.device)
    per_token = parameter.element_size() * (8 * hidden + 3 * intermediate)
    budget = int(GPU_MEMORY_SHARE * free // per_token)
    return max(CPU_TOKEN_BUDGET, min(budget, 1 << 20)), 4096
