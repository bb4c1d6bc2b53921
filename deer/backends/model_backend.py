"""The backend contract: what every engine must answer and provide, with shapes and units, and nothing about how.

A backend is the only code that touches a model.  ``ModelBackend`` states the contract as abstract members, so a
class that leaves one out is refused when the backend is chosen (``deer.backends.backend_class``) and cannot be made,
as lm-evaluation-harness's ``LM`` does.  It knows no engine: the transformers facts live in
``deer.backends.transformers_backend.TransformersBackend`` (the ``hf`` and ``plain`` backends); the vLLM backend
answers for its own engine.  A backend hands out three workers, each an instance of the abstract class below:

    encoder(special_tokens)        -> PromptEncoder      PromptEOL states (DEER) and next-token log-probs (LAMA)
    statement_scorer(pll_variant)  -> StatementScoring   whole statements' summed log-likelihoods (BEAR)
    mask_filler()                  -> MaskScoring        log p(token | sentence) at a mask (LAMA on a masked LM)

Token ids are the toolkit's (``deer.backends.tokenization.batch_token_ids`` with the BOS policy), whatever the engine,
so that every engine's vectors and scores are comparable.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass
class EncoderOutput:
    """float32 ``embeddings`` (n, output_size) (None when ``on_batch`` took them) and ``next_token_logprobs``
    float32 (n, len(next_token_ids)) in nats (None when no ids were asked)."""

    embeddings: np.ndarray | None
    next_token_logprobs: np.ndarray | None = None


class PromptEncoder(abc.ABC):
    """PromptEOL: each prompt's last-layer state at its last token, in input order (``tokenize`` then ``encode_ids``)."""

    tokenizer: Any
    special_tokens: str  # "bos" (the toolkit's BOS policy) or "tokenizer" (the tokenizer's own special tokens)
    show_progress: bool = True

    @property
    @abc.abstractmethod
    def output_size(self) -> int:
        """The vectors' width."""

    @abc.abstractmethod
    def encode_ids(self, id_lists: Sequence[Sequence[int]], next_token_ids: np.ndarray | None = None,
                   description: str = "encoding", progress=None,
                   on_batch: Callable[[np.ndarray, np.ndarray], None] | None = None) -> EncoderOutput:
        """``EncoderOutput`` for token lists: with ``next_token_ids`` (int ids), also log p(id | prompt) for each.
        ``progress``: a tqdm bar to advance by prompts finished.  ``on_batch(positions, vectors)``: each finished
        batch's float32 vectors handed on instead of gathered (then ``embeddings`` is None)."""

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        from deer.backends.tokenization import batch_token_ids

        return batch_token_ids(self.tokenizer, texts, self.special_tokens)

    def encode(self, texts: Sequence[str], next_token_ids: np.ndarray | None = None, description: str = "encoding",
               progress=None, on_batch: Callable[[np.ndarray, np.ndarray], None] | None = None) -> EncoderOutput:
        """``encode_ids`` of the texts' token ids."""
        return self.encode_ids(self.tokenize(texts), next_token_ids, description, progress, on_batch)


class StatementScoring(abc.ABC):
    """Whole statements' summed log-likelihoods in nats: every token after the first (the first is context only; with
    a BOS before it, the first statement token is scored), or the pseudo log-likelihood (PLL) on a masked LM."""

    method: str  # how ``score`` scores, recorded in metadata (e.g. "clm-shared-prefix-sum-logprob")
    statements_method: str  # how ``score_statements`` scores

    @abc.abstractmethod
    def score(self, context: str, continuations: Sequence[str]) -> np.ndarray:
        """float64 (len(continuations),): the score of each whole statement ``context + continuation``."""

    @abc.abstractmethod
    def score_statements(self, statements: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        """float64 (len(statements),): each statement's score; ``progress(k)`` is told as k statements finish."""

    @abc.abstractmethod
    def work(self) -> dict:
        """What was done so far (statements, tokens, forward seconds, ...) for metadata."""


class MaskScoring(abc.ABC):
    """LAMA on a masked LM."""

    @abc.abstractmethod
    def logprobs(self, sentences: Sequence[str], token_ids: np.ndarray) -> np.ndarray:
        """float32 (len(sentences), len(token_ids)): log p(token | sentence) in nats at each sentence's one mask."""


class ModelBackend(abc.ABC):
    """The base of every backend: the engine's facts and the three workers (see the module docstring).

    ``name``, ``can_cache`` (its results may be stored and reused) and ``store_key`` (what its vectors depend on
    beyond the model: {} where they are the model's own states) are class attributes; ``loaded``, the
    ``LoadedModel`` it was opened on (identity: name, fingerprints, dtype, device, tokenizer), is set by
    ``deer.backends.open_backend``, which calls ``load`` and then the constructor."""

    name = ""
    can_cache = False
    store_key: dict = {}

    @classmethod
    @abc.abstractmethod
    def load(cls, model, tokenizer=None, dtype: str = "auto", device: str = "auto"):
        """The ``LoadedModel`` this backend runs: an alias, hub id, folder or ``ModelSpec`` loaded by this engine (an
        engine refuses what it cannot run, e.g. a masked LM, before it loads anything); a model object as it is."""

    def __init__(self, model, tokenizer, token_budget: int | None = None, show_progress: bool = True):
        self.model, self.tokenizer, self.token_budget, self.show_progress = model, tokenizer, token_budget, show_progress
        self.loaded = None

    @property
    @abc.abstractmethod
    def max_positions(self) -> int | None:
        """Tokens one sequence may hold (None: the model states no limit)."""

    @property
    @abc.abstractmethod
    def is_masked_lm(self) -> bool:
        """Whether the model is a masked LM (BEAR then scores PLL; DEER refuses it)."""

    @property
    @abc.abstractmethod
    def device(self) -> Any:
        """The torch device where DEER's vectors are ranked (the engine's own, or the CPU)."""

    @property
    @abc.abstractmethod
    def output_size(self) -> int:
        """The encoder's vector width."""

    @abc.abstractmethod
    def evaluation_mode(self):
        """A context manager: the model runs as for probing inside (no dropout), as it was after."""

    @abc.abstractmethod
    def token_counts(self, texts: Sequence[str], special_tokens: str = "bos") -> list[int]:
        """Tokens of each text as the encoder feeds it (the length guard's count)."""

    @abc.abstractmethod
    def encoder(self, special_tokens: str = "bos") -> PromptEncoder:
        """A ``PromptEncoder`` (``special_tokens``: "bos" policy or "tokenizer")."""

    @abc.abstractmethod
    def statement_scorer(self, pll_variant: str = "within_word_l2r") -> StatementScoring:
        """A ``StatementScoring`` (``pll_variant`` for a masked LM)."""

    @abc.abstractmethod
    def mask_filler(self) -> MaskScoring:
        """A ``MaskScoring`` for a masked LM (a causal-only engine raises a ValueError naming itself)."""


def missing_members(cls) -> list[str]:
    """The abstract members ``cls`` leaves out (empty for a whole backend)."""
    return sorted(getattr(cls, "__abstractmethods__", ()))
