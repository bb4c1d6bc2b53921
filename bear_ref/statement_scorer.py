"""One interface over the two likelihood scorers: causal LMs (shared prefix) and masked LMs (PLL).

``score(context, continuations)`` returns one float64 per continuation such that ranking by it
is ranking by the whole statement's (pseudo) log-likelihood: the conditional log-likelihood
of the continuation for a causal LM (the context's part is the same for every candidate), the
full PLL of ``context + continuation`` for a masked LM (bidirectional: nothing is shared).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bear_ref.boundary import move_trailing_whitespace
from bear_ref.clm_scorer import SharedPrefixScorer
from bear_ref.pll import PLLScorer
from deer.models import is_masked_lm


class StatementScorer:
    def __init__(self, model, tokenizer, token_budget: int = 512, max_batch_size: int = 64, pll_variant: str = "within_word_l2r"):
        self.masked = is_masked_lm(model)
        if self.masked:
            self.pll = PLLScorer(model, tokenizer, pll_variant, token_budget=max(token_budget, 512), max_batch_size=max_batch_size)
            self.method = f"pll-{pll_variant}"
        else:
            self.clm = SharedPrefixScorer(model, tokenizer, token_budget, max_batch_size)
            self.method = "clm-shared-prefix-sum-logprob"

    def score(self, context: str, continuations: Sequence[str]) -> np.ndarray:
        if self.masked:
            statements = [context + c for c in continuations]
            return self.pll.score(statements)
        return self.clm.score_texts(context, continuations)

    def work(self) -> dict:
        if self.masked:
            return {"tokens": self.pll.tokens, "forward_seconds": self.pll.forward_seconds}
        return self.clm.stats.as_dict()


def split_template(template: str, subject: str) -> tuple[str, str]:
    """(shared prefix, suffix) of a BEAR template: the text before [Y], and from [Y] on.

    [X] is filled in both parts.  Statements are capitalised as lm-pub-quiz does (first
    character of the sentence); with [Y] first, the answer itself is capitalised.
    """
    from kg_data.bear import ANSWER, SUBJECT

    before, after = template.split(ANSWER)
    return before.replace(SUBJECT, subject), ANSWER + after.replace(SUBJECT, subject)


def fill_answer(prefix: str, suffix: str, answer: str) -> tuple[str, str]:
    """(context, continuation) for one answer, whitespace moved to the continuation."""
    from kg_data.bear import ANSWER

    continuation = suffix.replace(ANSWER, answer)
    if prefix:
        prefix = prefix[0].upper() + prefix[1:]
    elif continuation:
        continuation = continuation[0].upper() + continuation[1:]
    return move_trailing_whitespace(prefix, continuation)
