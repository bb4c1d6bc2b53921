"""Whole-statement log-likelihoods of many statements that share prefixes (causal LMs): BEAR's families of
statements merged into prefix tries, every distinct prefix read once.  A trie's nodes lie in one row, each
attending to its ancestors only at position id = its depth; only nodes with a child are fed, and a token's
log-prob is read from its parent's row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from deer.backends.attention import backend_for_custom_masks, custom_attention_mask
from deer.backends.boundary import common_prefix_length
from deer.backends.encoder import token_logprobs
from deer.backends.model_config import position_offset
from deer.backends.models import require_causal_lm
from deer.backends.tokenization import batch_token_ids
from deer.base.work import WorkCounter


@dataclasses.dataclass
class TrieRow:
    """One forward pass: trie nodes (token, parent or -1, depth); ``paths[k]``: statement ``statements[k]``'s nodes."""

    tokens: list[int] = dataclasses.field(default_factory=list)
    parents: list[int] = dataclasses.field(default_factory=list)
    depths: list[int] = dataclasses.field(default_factory=list)
    statements: list[int] = dataclasses.field(default_factory=list)
    paths: list[list[int]] = dataclasses.field(default_factory=list)

    def add(self, index: int, ids: Sequence[int], shared: int, previous_path: Sequence[int]) -> None:
        """Add statement ``index``, whose first ``shared`` tokens are ``previous_path``'s nodes."""
        path = list(previous_path[:shared])
        for depth in range(shared, len(ids)):
            self.tokens.append(int(ids[depth]))
            self.parents.append(path[-1] if path else -1)
            self.depths.append(depth)
            path.append(len(self.tokens) - 1)
        self.statements.append(index)
        self.paths.append(path)

    def fed_nodes(self) -> np.ndarray:
        """Indices of the nodes fed through the model: those with a child (a last token is only a target)."""
        parents = np.asarray(self.parents, dtype=np.int64)
        return np.unique(parents[parents >= 0])


def build_rows(sequences: Sequence[Sequence[int]], token_budget: int) -> list[TrieRow]:
    """Prefix tries over ``sequences`` (sorted), each of at most ``token_budget`` nodes where possible."""
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    rows: list[TrieRow] = []
    previous: Sequence[int] = []
    for index in order:
        ids = sequences[index]
        shared = common_prefix_length(previous, ids)
        if not rows or len(rows[-1].tokens) + len(ids) - shared > token_budget:
            rows.append(TrieRow())
            shared = 0
        rows[-1].add(index, ids, shared, rows[-1].paths[-1] if rows[-1].paths else [])
        previous = ids
    return rows


def ancestor_mask(parents: np.ndarray) -> np.ndarray:
    """Boolean (n, n): node i may attend to node j iff j is i or one of its ancestors (parents[i] < i)."""
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i, :i] = mask[parent, :i]
        mask[i, i] = True
    return mask


class PrefixTrieScorer:
    """Summed log-likelihood of whole statements for a causal LM (eval mode), prefixes read once."""

    method = "clm-prefix-trie-sum-logprob"

    def __init__(self, model, tokenizer, token_budget: int = 512):
        require_causal_lm(model, type(self).__name__)
        self.model, self.tokenizer, self.token_budget = model, tokenizer, token_budget
        self.device = next(model.parameters()).device
        self.stats = WorkCounter("statements", "statement_tokens", "fed_tokens", "tokens", "rows")

    def score_texts(self, statements: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        """float64 (n,): summed log p of every token after the first, in nats; ``progress(k)`` after each pass."""
        return self.score_ids(batch_token_ids(self.tokenizer, list(statements)), progress)

    @torch.inference_mode()
    def score_ids(self, sequences: Sequence[Sequence[int]], progress: Callable[[int], object] | None = None) -> np.ndarray:
        scores = np.zeros(len(sequences), dtype=np.float64)
        with self.stats.forward(), backend_for_custom_masks(self.model) as backend:
            self.stats.attention = backend
            for row in build_rows(sequences, self.token_budget):
                node_logprobs = self._node_logprobs(row)
                scores[row.statements] = [node_logprobs[path].sum() for path in row.paths]
                if progress is not None:
                    progress(len(row.statements))
        self.stats.add(statements=len(sequences), statement_tokens=sum(len(ids) for ids in sequences))
        return scores

    def _node_logprobs(self, row: TrieRow) -> np.ndarray:
        """log p(node's token | its ancestors) per node of ``row``: float64, 0 for roots."""
        parents = np.asarray(row.parents, dtype=np.int64)
        tokens = np.asarray(row.tokens, dtype=np.int64)
        logprobs = np.zeros(len(tokens), dtype=np.float64)
        fed_nodes = row.fed_nodes()
        if len(fed_nodes) == 0:
            return logprobs
        fed_index = np.full(len(tokens), -1, dtype=np.int64)
        fed_index[fed_nodes] = np.arange(len(fed_nodes))
        fed_parents = np.where(parents[fed_nodes] >= 0, fed_index[np.maximum(parents[fed_nodes], 0)], -1)
        depths = np.asarray(row.depths, dtype=np.int64)[fed_nodes]
        mask = custom_attention_mask(self.model, ancestor_mask(fed_parents), depths, depths, self.device)
        inputs = {"input_ids": torch.as_tensor(tokens[fed_nodes][None], device=self.device),
                  "position_ids": torch.as_tensor(depths[None] + position_offset(self.model), device=self.device)}
        hidden = self.model.base_model(**inputs, attention_mask=mask, use_cache=False).last_hidden_state[0]
        self.stats.add(rows=1, fed_tokens=len(fed_nodes), tokens=len(fed_nodes))
        # LM head once per fed node; every child reads its token's log-prob from its parent's row.
        targets = np.flatnonzero(parents >= 0)
        logprobs[targets] = token_logprobs(self.model, hidden, tokens[targets], fed_index[parents[targets]])
        return logprobs
