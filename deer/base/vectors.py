"""Unit vectors: the toolkit's one L2 normalisation."""

from __future__ import annotations

import numpy as np
import torch


def normalize_rows(vectors):
    """Unit-length rows, the one L2 normalisation of the toolkit (``torch.nn.functional.normalize``: each row
    over max(its norm, 1e-12), so a zero row stays zero): a tensor for a tensor, else a float32 array."""
    if isinstance(vectors, torch.Tensor):
        return torch.nn.functional.normalize(vectors, dim=1)
    return torch.nn.functional.normalize(torch.as_tensor(np.asarray(vectors, dtype=np.float32)), dim=1).numpy()
