"""One interface over the likelihood scorers: causal LMs (shared prefix, prefix trie) and masked LMs (PLL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from deer.backends.clm_scorer import SharedPrefixScorer
from deer.backends.model_backend import StatementScoring
from deer.backends.models import is_masked_lm
from deer.backends.pll import PLLScorer
from deer.backends.trie_scorer import PrefixTrieScorer


class StatementScorer(StatementScoring):
    """Whole statements' summed log-likelihoods (every token after the first) in nats: ``score`` for continuations
    of one context (BEAR on a KG: the context read once), ``score_statements`` for any (a prefix trie); PLL on a
    masked LM (bidirectional: nothing is shared)."""

    def __init__(self, model, tokenizer, token_budget: int = 512, max_batch_size: int = 64, pll_variant: str = "within_word_l2r"):
        self.masked = is_masked_lm(model)
        if self.masked:
            self.pll = PLLScorer(model, tokenizer, pll_variant, token_budget=max(token_budget, 512), max_batch_size=max_batch_size)
            self.method = self.statements_method = f"pll-{pll_variant}"
        else:
            self.clm = SharedPrefixScorer(model, tokenizer, token_budget)
            self.trie = PrefixTrieScorer(model, tokenizer, token_budget)
            self.method, self.statements_method = "clm-shared-prefix-sum-logprob", PrefixTrieScorer.method

    def score(self, context: str, continuations: Sequence[str]) -> np.ndarray:
        """float64 (len(continuations),): the score of each ``context + continuation``."""
        if self.masked:
            return self.pll.score([context + c for c in continuations])
        return self.clm.score_texts(context, continuations, whole=True)

    def score_statements(self, statements: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        """Whole-statement scores; ``progress(k)`` is told as statements finish."""
        if self.masked:
            scores = self.pll.score(list(statements))
            if progress is not None:
                progress(len(statements))
            return scores
        return self.trie.score_texts(statements, progress)

    def work(self) -> dict:
        """Tokens through the model and forward seconds, for the scorer(s) used so far."""
        if self.masked:
            return self.pll.stats.as_dict()
        if self.trie.stats.statements and not self.clm.stats.statements:
            return self.trie.stats.as_dict()
        work = self.clm.stats.as_dict()
        if self.trie.stats.statements:
            work["prefix_trie"] = self.trie.stats.as_dict()
        return work
