"""Custom attention masks that every attention back-end honours.

The likelihood scorers lay several sequences into one row with a 4-D mask and explicit position ids.  The
mask is additive float (eager adds it to the scores: a boolean one would mask nothing).  FlashAttention
ignores custom masks, so for those calls the model is switched to SDPA (or eager) and back.  A custom mask
replaces transformers' own, so sliding windows are applied here by position id (q - k < window).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from deer.backends.model_config import text_config

FULL = "full_attention"
SLIDING = "sliding_attention"
# Back-ends whose attention functions add a float 4-D mask to the scores as given.
MASK_HONOURING_BACKENDS = ("eager", "sdpa")


def attention_windows(model) -> int | None | dict[str, int | None]:
    """The sliding window of the model's layers (None = full attention), or {layer kind: window} where layers
    differ; NotImplementedError for other layer kinds (chunked, linear) rather than scoring them wrongly."""
    config = text_config(model)
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        kinds = set(layer_types)
        if unknown := kinds - {FULL, SLIDING}:
            raise NotImplementedError(f"{type(model).__name__} has attention layers of kind {sorted(unknown)}; "
                                      "custom masks for them are not implemented")
        if kinds == {FULL}:
            return None
        return {kind: (window if kind == SLIDING else None) for kind in sorted(kinds)}
    # No per-layer kinds: a configured window applies to every layer (Mistral), unless the
    # config says sliding attention is switched off (Qwen2-style ``use_sliding_window``).
    if window is None or not getattr(config, "use_sliding_window", True):
        return None
    return int(window)


def custom_attention_mask(model, allowed: np.ndarray, query_positions: np.ndarray, key_positions: np.ndarray,
                          device: str | torch.device) -> torch.Tensor | dict[str, torch.Tensor]:
    """The ``attention_mask`` for a forward pass where query i may attend to key j iff ``allowed`` (q, k) (cached keys
    first), position ids given for sliding windows: (1, 1, q, k) additive, in the model's dtype (per layer kind)."""
    dtype = next(model.parameters()).dtype
    if not dtype.is_floating_point:
        dtype = torch.float32
    allowed_t = torch.as_tensor(np.asarray(allowed, dtype=bool), device=device)
    queries, keys = np.asarray(query_positions, dtype=np.int64), np.asarray(key_positions, dtype=np.int64)
    distance = torch.as_tensor(queries[:, None] - keys[None, :], device=device)

    def mask_for(window: int | None) -> torch.Tensor:
        visible = allowed_t if window is None else allowed_t & (distance < window)
        mask = torch.zeros(visible.shape, dtype=dtype, device=device)
        return mask.masked_fill_(~visible, torch.finfo(dtype).min)[None, None]

    windows = attention_windows(model)
    if isinstance(windows, dict):
        return {kind: mask_for(window) for kind, window in windows.items()}
    return mask_for(windows)


def _configs(model) -> list:
    """Every distinct config object the model's modules read their attention back-end from."""
    configs = (getattr(module, "config", None) for module in model.modules())
    return list({id(config): config for config in configs if hasattr(config, "_attn_implementation_internal")}.values())


def configured_backend(model) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def mask_backend(model) -> str:
    """The back-end custom-mask forward passes run with: the configured one if it honours masks."""
    backend = configured_backend(model)
    if backend in MASK_HONOURING_BACKENDS:
        return backend
    return "sdpa" if getattr(model, "_supports_sdpa", False) else "eager"


@contextlib.contextmanager
def backend_for_custom_masks(model) -> Iterator[str]:
    """Within the block the model attends with ``mask_backend(model)``, whose name it yields (the configs' field set
    directly, as ``set_attn_implementation`` does after its checks)."""
    wanted = mask_backend(model)
    configs = _configs(model)
    saved = [config._attn_implementation_internal for config in configs]
    if wanted == configured_backend(model):
        yield wanted
        return
    try:
        for config in configs:
            config._attn_implementation_internal = wanted
        yield wanted
    finally:
        for config, backend in zip(configs, saved, strict=True):
            config._attn_implementation_internal = backend
