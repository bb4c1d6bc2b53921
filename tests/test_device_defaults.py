"""What a user gets without flags: dtype and batch limits chosen from the device."""

from __future__ import annotations

import types

import torch

from deer.backends.batching import CPU_TOKEN_BUDGET, auto_batch_limits
from deer.backends.models import resolve_dtype


def test_dtype_auto_is_float32_on_the_cpu_and_half_precision_on_a_gpu(monkeypatch):
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("float16", "cpu") == "float16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_dtype("auto", "cuda:0") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_dtype("auto", "cuda:0") == "float16"


def test_batch_limits_on_the_cpu(tiny_clm):
    assert auto_batch_limits(tiny_clm[0]) == (CPU_TOKEN_BUDGET, 128)


def test_batch_limits_on_a_gpu_follow_its_free_memory(monkeypatch):
    parameter = types.SimpleNamespace(device=torch.device("cuda", 0), element_size=lambda: 2)
    config = types.SimpleNamespace(hidden_size=576, intermediate_size=1536)
    model = types.SimpleNamespace(parameters=lambda: iter([parameter]), config=config)
    for free in (80e9, 2e9, 1e6):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, free=free: (int(free), int(80e9)))
        budget, rows = auto_batch_limits(model)
        expected = int(0.25 * int(free) // (2 * (8 * 576 + 3 * 1536)))
        assert budget == max(CPU_TOKEN_BUDGET, min(expected, 1 << 20)) and rows == 4096
