"""Shared-prefix scoring for causal LMs: the context once, every continuation after it.

For one context of P tokens and n continuations the plain way (one forward pass per whole
statement) reads n x (P + m) tokens.  Here the context is read once (keeping its 1-row
key/value cache); the continuations are then packed side by side into single rows on top of
that cache, with a block-diagonal causal mask and explicit position ids, so there is no
padding and the context cache is never copied.  Tokens passed through the model:
P + sum(m_i - 1), because

* the first continuation token is predicted by the context's last hidden state, and
* the last continuation token is only ever a target, never an input;

and the LM head is applied only to rows whose next token is scored.  Packs are kept short
(``token_budget`` tokens) because each packed token attends over the whole pack.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from bear_ref.boundary import SplitStatements, split_statements
from deer.core.attention import backend_for_custom_masks, custom_attention_mask
from deer.core.encoder import next_token_log_softmax
from deer.core.packing import consecutive_packs, packed_attention_mask
from deer.core.tokenization import padding_id
from deer.core.work import WorkCounter


class SharedPrefixScorer:
    """Conditional log-likelihood of continuations after a shared context (causal LM, eval mode).

    ``token_budget``: continuation tokens packed into one forward pass (attention inside a pack
    is quadratic in its length, so a few hundred is the sweet spot on CPU); ``max_batch_size``
    is kept for interface compatibility with the masked-LM scorer.
    """

    def __init__(self, model, tokenizer, token_budget: int = 512, max_batch_size: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        self.pad_id = padding_id(tokenizer)
        self.stats = WorkCounter("contexts", "statements", "context_tokens", "continuation_tokens", "tokens", "padded_tokens", "scored_tokens")

    def score_texts(self, context: str, continuations: Sequence[str], whole: bool = False) -> np.ndarray:
        """Summed log p(continuation tokens | context) per continuation: float64 (n,), nats.

        ``whole=True``: the whole statement's summed log-likelihood (every token after the
        first) instead.  The two rank alike only when every statement splits exactly after the
        context; where a token straddles the boundary (SentencePiece vocabularies merge across
        it), statements condition on different prefixes and only the whole score is comparable.
        """
        return self.score_split(split_statements(self.tokenizer, context, continuations), whole)

    def score_split(self, split: SplitStatements, whole: bool = False) -> np.ndarray:
        return self.score_ids(split.context_ids, split.continuation_ids, split.shared_lengths, whole)

    @torch.inference_mode()
    def score_ids(
        self,
        context_ids: Sequence[int],
        continuation_ids: Sequence[Sequence[int]],
        shared_lengths: Sequence[int] | None = None,
        whole: bool = False,
    ) -> np.ndarray:
        """As ``score_texts`` for token ids; statement i is ``context_ids[:shared_lengths[i]] + continuation_ids[i]``."""
        n = len(continuation_ids)
        scores = np.zeros(n, dtype=np.float64)
        if n == 0:
            return scores
        shared_lengths = [len(context_ids)] * n if shared_lengths is None else list(shared_lengths)
        # One back-end for the whole call: the context's cache and the packs read it alike.
        with self.stats.forward(), backend_for_custom_masks(self.model) as backend:
            self.stats.attention = backend
            scores = self._score_after_context(context_ids, continuation_ids, shared_lengths, whole)
        self.stats.add(statements=n, scored_tokens=sum(len(ids) for ids in continuation_ids))
        return scores

    def _score_after_context(self, context_ids, continuation_ids, shared_lengths, whole: bool) -> np.ndarray:
        scores = np.zeros(len(continuation_ids), dtype=np.float64)
        base = self.model.base_model
        output = base(
            input_ids=torch.as_tensor([list(context_ids)], device=self.device),
            past_key_values=DynamicCache(),
            use_cache=True,
        )
        context_hidden = output.last_hidden_state[0]  # (P, d)
        cache = output.past_key_values
        self.stats.add(contexts=1, context_tokens=len(context_ids), tokens=len(context_ids))
        if whole:
            # Statement i's own prefix, context_ids[:shared_lengths[i]], scored once for all.
            targets = torch.as_tensor(list(context_ids[1:]), device=self.device)
            prefix_logprob = np.concatenate([[0.0], np.cumsum(self._token_logprobs(context_hidden[:-1], targets))])
            scores += prefix_logprob[np.asarray(shared_lengths) - 1]

        # Each statement's first token comes from the context state just before it; the LM head
        # runs once per distinct such state (normally one: the context's last), not per statement.
        states, which = np.unique([length - 1 for length in shared_lengths], return_inverse=True)
        state_logprobs = next_token_log_softmax(self.model, context_hidden[torch.as_tensor(states, device=self.device)])
        firsts = torch.as_tensor([ids[0] for ids in continuation_ids], device=self.device)
        scores += state_logprobs[torch.as_tensor(which, device=self.device), firsts].double().cpu().numpy()

        # The rest: continuations packed side by side into one row on top of the 1-row context
        # cache; a block mask keeps them apart, so the context cache is never copied.
        inputs = [i for i, ids in enumerate(continuation_ids) if len(ids) > 1]
        for pack in consecutive_packs([len(continuation_ids[i]) - 1 for i in inputs], self.token_budget):
            rows = [inputs[k] for k in pack]
            scores[rows] += self._score_pack(base, cache, len(context_ids), rows, continuation_ids, shared_lengths)
        return scores

    def _score_pack(self, base, cache, context_length, rows, continuation_ids, shared_lengths) -> np.ndarray:
        """Summed log-probs of tokens 2.. of each continuation in ``rows``, in one forward pass."""
        inputs = [list(continuation_ids[i][:-1]) for i in rows]
        targets = [list(continuation_ids[i][1:]) for i in rows]
        widths = [len(ids) for ids in inputs]
        starts = [shared_lengths[i] for i in rows]
        positions = np.concatenate([np.arange(w) + start for w, start in zip(widths, starts, strict=True)])
        key_positions = np.concatenate([np.arange(context_length), positions])
        mask = custom_attention_mask(self.model, packed_attention_mask(context_length, starts, widths), positions, key_positions, self.device)
        hidden = base(
            input_ids=torch.as_tensor([sum(inputs, [])], device=self.device),
            position_ids=torch.as_tensor(positions[None], device=self.device),
            attention_mask=mask,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state[0]
        # Drop the pack again so the next pack sees only the context (negative = tokens to remove).
        cache.crop(context_length - cache.get_seq_length())
        token_logprobs = self._token_logprobs(hidden, torch.as_tensor(sum(targets, []), device=self.device))
        owner = np.repeat(np.arange(len(rows)), widths)
        self.stats.add(continuation_tokens=sum(widths), tokens=sum(widths), padded_tokens=sum(widths))
        return np.bincount(owner, weights=token_logprobs, minlength=len(rows))

    def _token_logprobs(self, hidden: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
        """log p(target_j | row j) for hidden rows (k, d) and targets (k,): float64 (k,).

        In chunks of rows, so the (rows x vocabulary) logits stay small for large vocabularies.
        """
        parts = []
        for start in range(0, len(hidden), 256):
            logprobs = next_token_log_softmax(self.model, hidden[start : start + 256])
            parts.append(logprobs.gather(1, targets[start : start + 256, None])[:, 0].double().cpu().numpy())
        return np.concatenate(parts) if parts else np.zeros(0)
