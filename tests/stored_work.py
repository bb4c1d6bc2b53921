"""Helpers for the tests of stored work reused only for what it was made with: a quiet log, and a caching backend whose
scores are not the model's own (declared in its store_key)."""

from __future__ import annotations

from deer.backends.hf import HFBackend
from deer.backends.statement_scorer import StatementScorer


def _quiet(*_args) -> None:
    return None


class _NegatedScorer(StatementScorer):
    def score(self, context, continuations):
        return -super().score(context, continuations)

    def score_statements(self, statements, *args, **kwargs):
        return -super().score_statements(statements, *args, **kwargs)


class ShiftedBackend(HFBackend):
    """A caching backend whose scores are not the model's own (declared in ``store_key``, as the protocol asks)."""

    name = "shifted"
    store_key = {"variant": "negated-scores"}

    def statement_scorer(self, pll_variant="within_word_l2r"):
        return _NegatedScorer(self.model, self.tokenizer, token_budget=512, pll_variant=pll_variant)
