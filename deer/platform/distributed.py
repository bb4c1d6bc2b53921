"""DEER's forward passes shared between the processes of a data-parallel job (torch.distributed).

Under DDP every process holds the whole model, so each can encode a share of the prompts: the
prompts are ordered by token count and dealt out like cards (process r takes every world_size-th,
starting at r), so every share has about the same number of prompts and tokens.  The vectors are
then all-gathered, so every process holds all of them in input order and ranks them itself (cheap
next to the forward passes, deterministic, and no process waits on another's ranking).

Sharded weights (FSDP, DeepSpeed ZeRO-3) are gathered for the probe first (``full_weights``), so
each process then runs its share on the whole model like under DDP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np

from deer.backends.encoder import EncoderOutput, PromptEOLEncoder


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) outside torch.distributed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def my_share(lengths: Sequence[int], rank: int, world_size: int) -> np.ndarray:
    """Positions this process encodes: every ``world_size``-th prompt of the longest-first order."""
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    return np.sort(order[rank::world_size])


class ShardedEncoder:
    """A ``PromptEOLEncoder`` whose ``encode`` runs only this process's share of the prompts and
    returns every prompt's results (all-gathered).  Every process must call ``encode`` with the
    same texts, in the same order of calls.  ``stats`` count this process's own work."""

    def __init__(self, encoder: PromptEOLEncoder):
        self.inner = encoder
        self.rank, self.world_size = world()

    def __getattr__(self, name):  # stats, token_budget, device, show_progress, ...
        return getattr(self.inner, name)

    def encode(self, texts: Sequence[str], next_token_ids: np.ndarray | None = None, description: str = "encoding",
               progress=None, on_batch: Callable[[np.ndarray, np.ndarray], None] | None = None) -> EncoderOutput:
        import torch.distributed as dist

        id_lists = self.inner.tokenize(texts)
        mine = my_share([len(ids) for ids in id_lists], self.rank, self.world_size)
        out = self.inner.encode_ids([id_lists[i] for i in mine], next_token_ids, description)
        parts: list = [None] * self.world_size
        if self.world_size > 1:
            dist.all_gather_object(parts, (mine, out.embeddings, out.next_token_logprobs))
        else:
            parts = [(mine, out.embeddings, out.next_token_logprobs)]
        width = next(p[1].shape[1] for p in parts)
        embeddings = np.zeros((len(texts), width), dtype=np.float32)
        logprobs = None if next_token_ids is None else np.zeros((len(texts), len(next_token_ids)), dtype=np.float32)
        for positions, vectors, part_logprobs in parts:
            embeddings[positions] = vectors
            if logprobs is not None:
                logprobs[positions] = part_logprobs
        if progress is not None:
            progress.update(len(texts))
        if on_batch is not None:
            on_batch(np.arange(len(texts)), embeddings)
            return EncoderOutput(None, logprobs)
        return EncoderOutput(embeddings, logprobs)


@contextlib.contextmanager
def full_weights(model):
    """The whole weights on every process for the enclosed probe: FSDP's ``summon_full_params``
    (read-only), DeepSpeed ZeRO-3's ``GatheredParameters``; a replicated (DDP) or single-process
    model as it is."""
    if any(hasattr(p, "ds_id") for p in model.parameters()):  # DeepSpeed ZeRO-3 partitions
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            yield model
        return
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # a torch without FSDP
        FSDP = None  # noqa: N806
    if FSDP is not None and any(isinstance(m, FSDP) for m in model.modules()):
        with FSDP.summon_full_params(model, writeback=False, recurse=True):
            yield model
        return
    yield model
