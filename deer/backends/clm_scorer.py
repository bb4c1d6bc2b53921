"""Shared-prefix scoring for causal LMs: the context read once (its 1-row key/value cache), the continuations
on top of it.  ``layout="packed"``: continuations side by side in rows; ``layout="trie"`` (default): every
distinct continuation prefix fed once (11% fewer tokens on WN18RR, ``benchmarks/bench_bear.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from deer.backends.attention import backend_for_custom_masks
from deer.backends.boundary import SplitStatements, split_statements
from deer.backends.encoder import next_token_log_softmax, token_logprobs
from deer.backends.models import require_causal_lm
from deer.backends.packing import consecutive_packs
from deer.backends.shared_prefix import context_cache, forward_on_cache, packed_forward
from deer.backends.trie_scorer import TrieRow, ancestor_mask, build_rows
from deer.base.work import WorkCounter


class SharedPrefixScorer:
    """Log-likelihood of continuations after a shared context (causal LM); ``token_budget``: tokens per pass."""

    LAYOUTS = ("packed", "trie")

    def __init__(self, model, tokenizer, token_budget: int = 512, layout: str = "trie"):
        if layout not in self.LAYOUTS:
            raise ValueError(f"layout must be one of {self.LAYOUTS}, not {layout!r}")
        require_causal_lm(model, type(self).__name__)
        self.model, self.tokenizer, self.token_budget, self.layout = model, tokenizer, token_budget, layout
        self.device = next(model.parameters()).device
        self.stats = WorkCounter("contexts", "statements", "context_tokens", "continuation_tokens", "trie_nodes", "tokens",
                                 "padded_tokens", "scored_tokens")

    def score_texts(self, context: str, continuations: Sequence[str], whole: bool = False) -> np.ndarray:
        """Summed log p(continuation tokens | context): float64 (n,), nats; ``whole=True``: the whole statement's
        (the only comparable score where a token straddles the boundary)."""
        return self.score_split(split_statements(self.tokenizer, context, continuations), whole)

    def score_split(self, split: SplitStatements, whole: bool = False) -> np.ndarray:
        return self.score_ids(split.context_ids, split.continuation_ids, split.shared_lengths, whole)

    @torch.inference_mode()
    def score_ids(self, context_ids: Sequence[int], continuation_ids: Sequence[Sequence[int]],
                  shared_lengths: Sequence[int] | None = None, whole: bool = False) -> np.ndarray:
        """As ``score_texts`` for token ids; statement i is ``context_ids[:shared_lengths[i]] + continuation_ids[i]``."""
        n = len(continuation_ids)
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        shared_lengths = [len(context_ids)] * n if shared_lengths is None else list(shared_lengths)
        # One back-end for the whole call: the context's cache and the packs read it alike.
        with self.stats.forward(), backend_for_custom_masks(self.model) as backend:
            self.stats.attention = backend
            scores = self._score_after_context(context_ids, continuation_ids, shared_lengths, whole)
        self.stats.add(statements=n, scored_tokens=sum(len(ids) for ids in continuation_ids),
                       continuation_tokens=sum(len(ids) - 1 for ids in continuation_ids))
        return scores

    def _score_after_context(self, context_ids, continuation_ids, shared_lengths, whole: bool) -> np.ndarray:
        scores = np.zeros(len(continuation_ids), dtype=np.float64)
        context_hidden, cache = context_cache(self.model, context_ids)  # (P, d), the context's key/value cache
        context_length = len(context_ids)
        self.stats.add(contexts=1, context_tokens=context_length, tokens=context_length)
        if whole:
            # Statement i's own prefix, context_ids[:shared_lengths[i]], scored once for all.
            prefix_logprob = np.concatenate([[0.0], np.cumsum(token_logprobs(self.model, context_hidden[:-1], context_ids[1:]))])
            scores += prefix_logprob[np.asarray(shared_lengths) - 1]

        # Each statement's first token comes from the context state just before it; the LM head
        # runs once per distinct such state (normally one: the context's last), not per statement.
        states, which = np.unique([length - 1 for length in shared_lengths], return_inverse=True)
        state_logprobs = next_token_log_softmax(self.model, context_hidden[torch.as_tensor(states, device=self.device)])
        firsts = torch.as_tensor([ids[0] for ids in continuation_ids], device=self.device)
        scores += state_logprobs[torch.as_tensor(which, device=self.device), firsts].double().cpu().numpy()

        if self.layout == "trie":
            # Each continuation keyed by its shared length as a first, never-fed "token": statements hanging
            # off different context positions get separate roots.
            keyed = [[length, *ids] for length, ids in zip(shared_lengths, continuation_ids, strict=True)]
            for row in build_rows(keyed, self.token_budget):
                node_logprobs = self._trie_logprobs(cache, context_length, row)
                for index, path in zip(row.statements, row.paths, strict=True):
                    scores[index] += node_logprobs[path].sum()
            return scores

        # Tokens 2.. of the continuations, packed side by side into rows on the context cache.
        inputs = [i for i, ids in enumerate(continuation_ids) if len(ids) > 1]
        for pack in consecutive_packs([len(continuation_ids[i]) - 1 for i in inputs], self.token_budget):
            rows = [inputs[k] for k in pack]
            widths = [len(continuation_ids[i]) - 1 for i in rows]
            hidden = packed_forward(self.model, cache, context_length, [continuation_ids[i][:-1] for i in rows],
                                    [shared_lengths[i] for i in rows])
            logprobs = token_logprobs(self.model, hidden, [t for i in rows for t in continuation_ids[i][1:]])
            self.stats.add(tokens=sum(widths), padded_tokens=sum(widths))
            scores[rows] += np.bincount(np.repeat(np.arange(len(rows)), widths), weights=logprobs, minlength=len(rows))
        return scores

    def _trie_logprobs(self, cache, context_length: int, row: TrieRow) -> np.ndarray:
        """log p(node's token | its prefix) per node of ``row`` (0 for roots and first tokens: scored from the context)."""
        parents = np.asarray(row.parents, dtype=np.int64)
        depths = np.asarray(row.depths, dtype=np.int64)
        tokens = np.asarray(row.tokens, dtype=np.int64)
        logprobs = np.zeros(len(tokens), dtype=np.float64)
        shared = tokens.copy()  # every node's shared context length: its root's key
        for node, parent in enumerate(parents):
            if parent >= 0:
                shared[node] = shared[parent]
        fed = row.fed_nodes()
        fed = fed[depths[fed] > 0]  # roots are keys, not tokens
        if len(fed) == 0:
            return logprobs
        fed_index = np.full(len(tokens), -1, dtype=np.int64)
        fed_index[fed] = np.arange(len(fed))
        positions = shared[fed] + depths[fed] - 1
        allowed = np.hstack([np.arange(context_length)[None, :] < shared[fed][:, None], ancestor_mask(fed_index[parents[fed]])])
        hidden = forward_on_cache(self.model, cache, context_length, tokens[fed].tolist(), positions, allowed)
        self.stats.add(trie_nodes=len(fed), tokens=len(fed), padded_tokens=len(fed))
        # Tokens 2.. of each continuation: read from the parent's row (the LM head once per fed node).
        targets = np.flatnonzero(depths >= 2)
        logprobs[targets] = token_logprobs(self.model, hidden, tokens[targets], fed_index[parents[targets]])
        return logprobs
