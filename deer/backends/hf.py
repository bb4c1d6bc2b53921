"""The Hugging Face backend: today's kernels, each written once (``deer.backends``'s default)."""

from __future__ import annotations

from deer.backends.encoder import PromptEOLEncoder
from deer.backends.mask_fill import DEFAULT_TOKEN_BUDGET, MaskFiller
from deer.backends.statement_scorer import StatementScorer
from deer.backends.transformers_backend import TransformersBackend

STATEMENT_TOKEN_BUDGET = 512  # padded tokens per batch of statements when none is given


class HFBackend(TransformersBackend):
    """Batched kernels: shared few-shot prefixes, shared query caches, prefix tries (the default)."""

    name = "hf"
    can_cache = True

    def encoder(self, special_tokens: str = "bos") -> PromptEOLEncoder:
        return PromptEOLEncoder(self.model, self.tokenizer, token_budget=self.token_budget, show_progress=self.show_progress,
                                special_tokens=special_tokens)

    def statement_scorer(self, pll_variant: str = "within_word_l2r") -> StatementScorer:
        budget = STATEMENT_TOKEN_BUDGET if self.token_budget is None else self.token_budget
        return StatementScorer(self.model, self.tokenizer, token_budget=budget, pll_variant=pll_variant)

    def mask_filler(self) -> MaskFiller:
        return MaskFiller(self.model, self.tokenizer, DEFAULT_TOKEN_BUDGET if self.token_budget is None else self.token_budget)
