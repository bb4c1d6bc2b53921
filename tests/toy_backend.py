"""A backend added from outside, in one module: the plain backend's numbers through another class.

It is registered by name (``deer.backends.register_backend`` or a package's ``deer.backends`` entry
point) and says it cannot cache; nothing else in the toolkit names it (``tests/test_toy_backend.py``)."""

from __future__ import annotations

from deer.backends import ModelBackend
from deer.backends.plain import PlainBackend


class ToyBackend(ModelBackend):
    name = "toy"
    can_cache = False  # so cache=True is refused on it, by name
    store_key: dict = {}

    def __init__(self, model, tokenizer, token_budget: int | None = None, show_progress: bool = True):
        super().__init__(model, tokenizer, token_budget, show_progress)
        self._plain = PlainBackend(model, tokenizer, token_budget=token_budget, show_progress=show_progress)

    def encoder(self, special_tokens: str = "bos"):
        return self._plain.encoder(special_tokens)

    def statement_scorer(self, pll_variant: str = "within_word_l2r"):
        return self._plain.statement_scorer(pll_variant)

    def mask_filler(self):
        return self._plain.mask_filler()
