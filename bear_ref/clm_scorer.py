"""Shared-prefix scoring for causal LMs: the context once, every continuation after it.

For one context of P tokens and n continuations the plain way (one forward pass per whole
statement) reads n x (P + m) tokens.  Here the context is read once (keeping its key/value
cache); each continuation's tokens then run in batches of equal length (no padding) on top
of that cache.  Tokens passed through the model: P + sum(m_i - 1), because

* the first continuation token is predicted by the context's last hidden state, and
* the last continuation token is only ever a target, never an input;

and the LM head is applied only to rows whose next token is scored.  No attention mask is
needed: the cache holds only the context, and every row of a batch has the same length.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from typing import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from bear_ref.boundary import SplitStatements, split_statements
from deer.batching import pad_right
from deer.encoder import next_token_log_softmax


@dataclasses.dataclass
class ScorerStats:
    """Work done: contexts and statements scored, tokens through the model, forward seconds."""

    contexts: int = 0
    statements: int = 0
    context_tokens: int = 0
    continuation_tokens: int = 0
    padded_tokens: int = 0
    scored_tokens: int = 0
    forward_seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.context_tokens + self.continuation_tokens

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "tokens": self.tokens}


def _cache_prefix(cache: DynamicCache, length: int, rows: int) -> DynamicCache:
    """A cache holding the first ``length`` positions of a 1-row cache, repeated ``rows`` times.

    ``expand`` makes views; the model's concatenation with new keys materialises them once.
    """
    layers = [
        (layer.keys[:, :, :length].expand(rows, -1, -1, -1), layer.values[:, :, :length].expand(rows, -1, -1, -1))
        for layer in cache.layers
    ]
    return DynamicCache(ddp_cache_data=layers)


class SharedPrefixScorer:
    """Conditional log-likelihood of continuations after a shared context (causal LM, eval mode).

    ``token_budget``: most padded continuation tokens per batch; ``max_batch_size`` also bounds
    the memory of the repeated context cache (rows x P x layers x kv width).
    """

    def __init__(self, model, tokenizer, token_budget: int = 2048, max_batch_size: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (tokenizer.eos_token_id or 0))
        self.stats = ScorerStats()

    def score_texts(self, context: str, continuations: Sequence[str]) -> np.ndarray:
        """Summed log p(continuation tokens | context) per continuation: float64 (n,), nats."""
        return self.score_split(split_statements(self.tokenizer, context, continuations))

    def score_split(self, split: SplitStatements) -> np.ndarray:
        return self.score_ids(split.context_ids, split.continuation_ids, split.shared_lengths)

    @torch.inference_mode()
    def score_ids(
        self, context_ids: Sequence[int], continuation_ids: Sequence[Sequence[int]], shared_lengths: Sequence[int] | None = None
    ) -> np.ndarray:
        """As ``score_texts`` for token ids; statement i is ``context_ids[:shared_lengths[i]] + continuation_ids[i]``."""
        n = len(continuation_ids)
        scores = np.zeros(n, dtype=np.float64)
        if n == 0:
            return scores
        shared_lengths = [len(context_ids)] * n if shared_lengths is None else list(shared_lengths)
        started = time.perf_counter()
        base = self.model.base_model
        output = base(
            input_ids=torch.as_tensor([list(context_ids)], device=self.device),
            past_key_values=DynamicCache(),
            use_cache=True,
        )
        context_hidden = output.last_hidden_state[0]  # (P, d)
        cache = output.past_key_values
        self.stats.contexts += 1
        self.stats.context_tokens += len(context_ids)

        # Each statement's first token comes from the context state just before it.
        firsts = torch.as_tensor([ids[0] for ids in continuation_ids], device=self.device)
        before = torch.as_tensor([length - 1 for length in shared_lengths], device=self.device)
        first_logprobs = self._token_logprobs(context_hidden[before], firsts)
        scores += first_logprobs

        # Group by (shared prefix, input length): every batch is rectangular, no padding at all.
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, ids in enumerate(continuation_ids):
            if len(ids) > 1:  # inputs: all but the last token
                groups[(shared_lengths[i], len(ids) - 1)].append(i)
        for (length, width), members in sorted(groups.items()):
            rows_per_batch = max(1, min(self.max_batch_size, self.token_budget // width))
            for first in range(0, len(members), rows_per_batch):
                rows = members[first : first + rows_per_batch]
                inputs, mask = pad_right([continuation_ids[i][:-1] for i in rows], self.pad_id)
                targets, _ = pad_right([continuation_ids[i][1:] for i in rows], self.pad_id)
                hidden = base(
                    input_ids=torch.as_tensor(inputs, device=self.device),
                    past_key_values=_cache_prefix(cache, length, len(rows)),
                    use_cache=True,
                ).last_hidden_state
                real = torch.as_tensor(mask, dtype=torch.bool, device=self.device)
                logprobs = self._token_logprobs(hidden[real], torch.as_tensor(targets, device=self.device)[real])
                per_row = torch.zeros(len(rows), dtype=torch.float64)
                per_row.index_add_(0, torch.nonzero(real.cpu(), as_tuple=True)[0], torch.as_tensor(logprobs))
                scores[rows] += per_row.numpy()
                self.stats.continuation_tokens += int(mask.sum())
                self.stats.padded_tokens += int(mask.size)
        self.stats.statements += n
        self.stats.scored_tokens += int(sum(len(ids) for ids in continuation_ids))
        self.stats.forward_seconds += time.perf_counter() - started
        return scores

    def _token_logprobs(self, hidden: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
        """log p(target_j | row j) for hidden rows (k, d) and targets (k,): float64 (k,)."""
        logprobs = next_token_log_softmax(self.model, hidden)
        return logprobs.gather(1, targets[:, None])[:, 0].double().cpu().numpy()
