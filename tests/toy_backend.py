"""A backend added from outside, in one module: the plain backend's numbers through another class.

It derives from the bare contract (``deer.backends.ModelBackend``, which knows no engine) and answers every member
itself, here by asking a plain backend; it is registered by name (``deer.backends.register_backend`` or a package's
``deer.backends`` entry point) and says it cannot cache; nothing else in the toolkit names it
(``tests/test_toy_backend.py``)."""

from __future__ import annotations

from deer.backends import ModelBackend
from deer.backends.plain import PlainBackend


class ToyBackend(ModelBackend):
    name = "toy"
    can_cache = False  # so cache=True is refused on it, by name
    store_key: dict = {}

    @classmethod
    def load(cls, model, tokenizer=None, dtype: str = "auto", device: str = "auto"):
        return PlainBackend.load(model, tokenizer, dtype, device)

    def __init__(self, model, tokenizer, token_budget: int | None = None, show_progress: bool = True):
        super().__init__(model, tokenizer, token_budget, show_progress)
        self._plain = PlainBackend(model, tokenizer, token_budget=token_budget, show_progress=show_progress)

    max_positions = property(lambda self: self._plain.max_positions)
    is_masked_lm = property(lambda self: self._plain.is_masked_lm)
    device = property(lambda self: self._plain.device)
    output_size = property(lambda self: self._plain.output_size)

    def evaluation_mode(self):
        return self._plain.evaluation_mode()

    def token_counts(self, texts, special_tokens: str = "bos"):
        return self._plain.token_counts(texts, special_tokens)

    def encoder(self, special_tokens: str = "bos"):
        return self._plain.encoder(special_tokens)

    def statement_scorer(self, pll_variant: str = "within_word_l2r"):
        return self._plain.statement_scorer(pll_variant)

    def mask_filler(self):
        return self._plain.mask_filler()
