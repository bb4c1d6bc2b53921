"""A benchmark backend (issue 30): deterministic vectors made fast from each prompt's token ids, so a
scale benchmark measures the pipeline (reading, filters, prompts, tokenization, stores, ranking) and
not the model.  Never a product backend: registered at run time through the backend seam
(``deer.backends.register_backend("hash", "hash_backend:HashBackend")``) by the scripts that use it, and
every result made with it says so (its store key and the run's ``backend`` metadata name it).

The prompts are tokenized by the model's own tokenizer, as the real encoder does; each prompt's vector
is a function of its token ids alone (a splitmix64 stream seeded by their hash), ``WIDTH`` wide.
"""

from __future__ import annotations

import hashlib

import numpy as np

from deer.backends.encoder import Encoder, EncoderOutput
from deer.backends.transformers_backend import TransformersBackend
from deer.base.work import WorkCounter

WIDTH = 2048  # OPT-1.3B's hidden size: the scale benchmark's vectors
ROWS_PER_BATCH = 4096


def _splitmix(seeds: np.ndarray, width: int) -> np.ndarray:
    """(len(seeds), width) float32 in [-1, 1): a splitmix64 stream per seed, vectorized."""
    with np.errstate(over="ignore"):
        z = seeds[:, None] + (np.arange(1, width + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))[None, :]
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return ((z >> np.uint64(40)).astype(np.float32) / np.float32(1 << 23) - 1.0).astype(np.float32)


class HashEncoder(Encoder):
    """``PromptEOLEncoder``'s interface: vectors from token ids, no model."""

    max_batch_size = ROWS_PER_BATCH

    def __init__(self, tokenizer, special_tokens: str = "bos", show_progress: bool = True, width: int = WIDTH):
        self.tokenizer, self.special_tokens, self.show_progress, self.width = tokenizer, special_tokens, show_progress, width
        self.token_budget = None
        self.stats = WorkCounter("prompts", "tokens", "padded_tokens")

    @property
    def output_size(self) -> int:
        return self.width

    def encode_ids(self, id_lists, next_token_ids=None, description="encoding", progress=None, on_batch=None) -> EncoderOutput:
        if next_token_ids is not None:
            raise ValueError("the hash backend has no next-token log-probabilities")
        vectors = [] if on_batch is None else None
        for start in range(0, len(id_lists), ROWS_PER_BATCH):
            with self.stats.forward():
                batch = id_lists[start:start + ROWS_PER_BATCH]
                seeds = np.array([int.from_bytes(hashlib.blake2b(np.asarray(ids, np.int64).tobytes(), digest_size=8).digest(),
                                                 "little") for ids in batch], dtype=np.uint64)
                block = _splitmix(seeds, self.width)
            tokens = sum(len(ids) for ids in batch)
            self.stats.add(prompts=len(batch), tokens=tokens, padded_tokens=tokens)
            if on_batch is None:
                vectors.append(block)
            else:
                on_batch(np.arange(start, start + len(batch)), block)
            if progress is not None:
                progress.update(len(batch))
        if on_batch is not None:
            return EncoderOutput(None)
        return EncoderOutput(np.concatenate(vectors) if vectors else np.zeros((0, self.width), np.float32))


class HashBackend(TransformersBackend):
    """The benchmark backend: ``encoder`` only (DEER); no statement scores."""

    name = "hash"
    can_cache = True
    store_key = {"backend": "hash-splitmix64-v1", "width": WIDTH}  # never the model's own vectors' store
    output_size = WIDTH  # its vectors' width, not the model's

    def encoder(self, special_tokens: str = "bos") -> HashEncoder:
        return HashEncoder(self.tokenizer, special_tokens, self.show_progress)

    def statement_scorer(self, pll_variant: str = "within_word_l2r"):
        raise ValueError("the hash backend scores no statements (it is for DEER's pipeline benchmark)")

    def mask_filler(self):
        raise ValueError("the hash backend fills no masks (it is for DEER's pipeline benchmark)")
