"""Unit vectors: the toolkit's one L2 normalisation."""

from __future__ import annotations

import numpy as np
import torch

NORM_FLOOR = 1e-12  # a norm below it divides as this (torch.nn.functional.normalize's eps): a zero row stays zero


def normalize_rows(vectors, norms=None, out=None):
    """Unit-length rows (each over max(its norm, ``NORM_FLOOR``)): a tensor for a tensor, else a float32 array.
    A tensor's ``norms`` ((n, 1), already computed) and ``out`` (a buffer) may be given."""
    if not isinstance(vectors, torch.Tensor):
        return normalize_rows(torch.as_tensor(np.asarray(vectors, dtype=np.float32))).numpy()
    if norms is None:
        norms = torch.linalg.vector_norm(vectors, dim=1, keepdim=True)
    return torch.div(vectors, norms.clamp_min(NORM_FLOOR), out=out)
