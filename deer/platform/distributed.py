"""DEER's forward passes shared between the processes of a data-parallel job (torch.distributed): each encodes a
share of the prompts, the vectors are all-gathered and every process ranks them itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np

from deer.backends.encoder import Encoder, EncoderOutput, PromptEOLEncoder


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) outside torch.distributed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class ShardedEncoder:
    """A ``PromptEOLEncoder`` whose ``encode`` runs this process's share of the prompts and returns every
    prompt's results; every process must call ``encode`` with the same texts, in the same order."""

    def __init__(self, encoder: PromptEOLEncoder):
        self.inner = encoder
        self.rank, self.world_size = world()

    def __getattr__(self, name):  # stats, token_budget, device, show_progress, ...
        return getattr(self.inner, name)

    encode = Encoder.encode  # the inner encoder's tokens, then this ``encode_ids``

    def encode_ids(self, id_lists: Sequence[Sequence[int]], next_token_ids: np.ndarray | None = None,
                   description: str = "encoding", progress=None,
                   on_batch: Callable[[np.ndarray, np.ndarray], None] | None = None) -> EncoderOutput:
        import torch.distributed as dist

        n = len(id_lists)  # one result per prompt, as ``encode``'s texts
        longest_first = np.argsort(-np.asarray([len(ids) for ids in id_lists], dtype=np.int64), kind="stable")
        mine = np.sort(longest_first[self.rank::self.world_size])  # this process's share: every world_size-th prompt
        out = self.inner.encode_ids([id_lists[i] for i in mine], next_token_ids, description)
        parts: list = [(mine, out.embeddings, out.next_token_logprobs)] * self.world_size
        if self.world_size > 1:
            dist.all_gather_object(parts, parts[0])
        width = next(p[1].shape[1] for p in parts)
        embeddings = np.zeros((n, width), dtype=np.float32)
        logprobs = None if next_token_ids is None else np.zeros((n, len(next_token_ids)), dtype=np.float32)
        for positions, vectors, part_logprobs in parts:
            embeddings[positions] = vectors
            if logprobs is not None:
                logprobs[positions] = part_logprobs
        if progress is not None:
            progress.update(n)
        if on_batch is not None:
            on_batch(np.arange(n), embeddings)
            return EncoderOutput(None, logprobs)
        return EncoderOutput(embeddings, logprobs)


@contextlib.contextmanager
def full_weights(model):
    """The whole weights on every process for the enclosed probe (FSDP, DeepSpeed ZeRO-3; others as they are)."""
    gathered = contextlib.nullcontext()
    if any(hasattr(p, "ds_id") for p in model.parameters()):  # DeepSpeed ZeRO-3 partitions
        import deepspeed

        gathered = deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)
    else:
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        except ImportError:  # a torch without FSDP
            FSDP = None  # noqa: N806
        if FSDP is not None and any(isinstance(m, FSDP) for m in model.modules()):
            gathered = FSDP.summon_full_params(model, writeback=False, recurse=True)
    with gathered:
        yield model
