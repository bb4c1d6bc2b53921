"""The plain backend: one whole forward pass per prompt or statement, as lm-pub-quiz scores.

Written for clarity, not speed (the model's own ``forward``): the oracle of the equivalence tests.
``plain_conditional_scores`` finds the continuation's tokens from the tokenizer's character offsets,
independently of ``deer.backends.boundary``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from deer.backends.batching import pad_right
from deer.backends.boundary import move_trailing_whitespace
from deer.backends.encoder import Encoder, EncoderOutput
from deer.backends.mask_fill import MaskFiller
from deer.backends.model_backend import StatementScoring
from deer.backends.models import is_masked_lm, require_causal_lm
from deer.backends.pll import plain_pll
from deer.backends.tokenization import batch_token_ids, bos_id, padding_id
from deer.backends.transformers_backend import TransformersBackend
from deer.base.work import WorkCounter


def statement_ids_and_start(tokenizer, context: str, continuation: str) -> tuple[list[int], int]:
    """(BOS + tokens of the whole statement, index of its first scored token: the first continuation token, but never
    the statement's first, which without a BOS has nothing before it and is context only)."""
    context, continuation = move_trailing_whitespace(context, continuation)
    encoded = tokenizer(context + continuation, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    # First token whose character span ends inside the continuation text.
    start = next(i for i, (_, end) in enumerate(encoded["offset_mapping"]) if end > len(context))
    bos = bos_id(tokenizer)
    if bos is not None:
        ids, start = [bos, *ids], start + 1
    return ids, max(start, 1)  # start 0 read the first token's log p after the row's last token (position -1)


@torch.inference_mode()
def plain_conditional_scores(model, tokenizer, context: str, continuations: Sequence[str], batch_size: int = 8,
                             stats: WorkCounter | None = None) -> np.ndarray:
    """Summed log p of each statement's continuation tokens from a full pass: float64 (n,)."""
    require_causal_lm(model, "plain_conditional_scores")
    device = next(model.parameters()).device
    statements = [statement_ids_and_start(tokenizer, context, c) for c in continuations]
    scores = np.zeros(len(statements), dtype=np.float64)
    stats = WorkCounter() if stats is None else stats
    for first in range(0, len(statements), batch_size):
        chunk = statements[first : first + batch_size]
        inputs, mask = pad_right([ids for ids, _ in chunk], padding_id(tokenizer))
        with stats.forward():
            # The model's forward already soft-caps its logits (Gemma): nothing to add here.
            logits = model(input_ids=torch.as_tensor(inputs, device=device), attention_mask=torch.as_tensor(mask, device=device)).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            for row, (ids, start) in enumerate(chunk):
                positions = torch.arange(start, len(ids))
                targets = torch.as_tensor(ids[start:], device=device)
                scores[first + row] = float(logprobs[row, positions - 1, targets].double().sum())
        stats.add(statements=len(chunk), tokens=int(mask.sum()), padded_tokens=int(mask.size))
    return scores


@torch.inference_mode()
def plain_logprobs(model, ids: Sequence[int]) -> torch.Tensor:
    """(len(ids), vocab) log p(next token) from one whole forward pass (the model's own logits)."""
    device = next(model.parameters()).device
    return torch.log_softmax(model(input_ids=torch.as_tensor([list(ids)], device=device)).logits[0].float(), dim=-1)


def plain_statement_score(model, ids: Sequence[int]) -> float:
    """Summed log-likelihood of every token after the first, from one whole forward pass."""
    logprobs = plain_logprobs(model, ids)
    targets = torch.as_tensor(list(ids[1:]), dtype=torch.long, device=logprobs.device)  # long also when empty (one token)
    return float(logprobs[torch.arange(len(ids) - 1, device=logprobs.device), targets].double().sum())


@torch.inference_mode()
def plain_last_state(model, ids: Sequence[int]) -> np.ndarray:
    """The last layer's state at the last token, from one whole pass of the base transformer."""
    device = next(model.parameters()).device
    return model.base_model(input_ids=torch.as_tensor([list(ids)], device=device)).last_hidden_state[0, -1].float().cpu().numpy()


class PlainEncoder(Encoder):
    """``PromptEOLEncoder``'s interface, one prompt per forward pass (next-token log-probs from a second, whole pass)."""

    max_batch_size = 1

    def __init__(self, model, tokenizer, special_tokens: str = "bos", show_progress: bool = True):
        self.model, self.tokenizer, self.special_tokens, self.show_progress = model, tokenizer, special_tokens, show_progress
        self.token_budget = None
        self.device = next(model.parameters()).device
        self.stats = WorkCounter("prompts", "tokens", "padded_tokens")

    def encode_ids(self, id_lists: Sequence[Sequence[int]], next_token_ids: np.ndarray | None = None,
                   description: str = "encoding", progress=None, on_batch=None) -> EncoderOutput:
        vectors, logprobs = [], []
        for position, ids in enumerate(id_lists):
            with self.stats.forward():
                vector = plain_last_state(self.model, ids)
                if next_token_ids is not None:
                    logprobs.append(plain_logprobs(self.model, ids)[-1, torch.as_tensor(np.asarray(next_token_ids))].cpu().numpy())
            self.stats.add(prompts=1, tokens=len(ids), padded_tokens=len(ids))
            if on_batch is not None:
                on_batch(np.asarray([position]), vector[None].astype(np.float32))
            else:
                vectors.append(vector)
            if progress is not None:
                progress.update(1)
        embeddings = None if on_batch is not None else np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        return EncoderOutput(embeddings, np.asarray(logprobs, dtype=np.float32) if next_token_ids is not None else None)


class PlainStatementScorer(StatementScoring):
    """``StatementScorer``'s interface, one statement (or, for PLL, one masked copy) per forward pass."""

    def __init__(self, model, tokenizer, pll_variant: str = "within_word_l2r"):
        self.model, self.tokenizer, self.pll_variant = model, tokenizer, pll_variant
        self.masked = is_masked_lm(model)
        self.method = self.statements_method = f"plain-pll-{pll_variant}" if self.masked else "plain-whole-statement-sum-logprob"
        self.stats = WorkCounter("statements", "tokens")

    def score(self, context: str, continuations: Sequence[str]) -> np.ndarray:
        return self.score_statements([context + c for c in continuations])

    def score_statements(self, statements: Sequence[str], progress=None) -> np.ndarray:
        scores = np.zeros(len(statements), dtype=np.float64)
        for i, statement in enumerate(statements):
            with self.stats.forward():
                if self.masked:
                    scores[i] = plain_pll(self.model, self.tokenizer, statement, self.pll_variant)
                else:
                    scores[i] = plain_statement_score(self.model, batch_token_ids(self.tokenizer, [statement])[0])
            self.stats.add(statements=1)
            if progress is not None:
                progress(1)
        return scores

    def work(self) -> dict:
        return self.stats.as_dict()


class PlainBackend(TransformersBackend):
    """One whole forward pass per prompt, statement (per masked copy for PLL) or masked sentence (see the module
    docstring); budgets do not apply."""

    name = "plain"
    can_cache = False  # a cross-check: reads and writes no store

    def encoder(self, special_tokens: str = "bos") -> PlainEncoder:
        return PlainEncoder(self.model, self.tokenizer, special_tokens, self.show_progress)

    def statement_scorer(self, pll_variant: str = "within_word_l2r") -> PlainStatementScorer:
        return PlainStatementScorer(self.model, self.tokenizer, pll_variant)

    def mask_filler(self) -> MaskFiller:
        return MaskFiller(self.model, self.tokenizer, token_budget=1)
