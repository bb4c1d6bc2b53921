"""The token boundary between a shared context (query text) and scored continuations.

The context is tokenised once and each continuation after it, meeting where the whole statement's
tokenisation puts the boundary.  Whitespace at the end of the context belongs to the continuation
(" Paris", as lm-evaluation-harness assumes).  A continuation's ids are the rest of its whole
statement's ids after the longest prefix shared with the context's; a token straddling the boundary
starts the continuation (``shared_lengths``): lm-pub-quiz's conditional score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from deer.backends.tokenization import batch_token_ids, token_ids


def move_trailing_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """("... is ", "Paris.") -> ("... is", " Paris.")."""
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + continuation


@dataclasses.dataclass
class SplitStatements:
    """Token ids of one context and of continuations that follow it.
    ``context_ids``: BOS + context tokens, length P.
    ``continuation_ids[i]``: tokens of statement i after its shared prefix (never empty).
    ``shared_lengths[i]``: how many of ``context_ids`` statement i starts with (<= P, >= 1);
    ``context_ids[:shared_lengths[i]] + continuation_ids[i]`` is statement i's whole tokenisation."""

    context_ids: list[int]
    continuation_ids: list[list[int]]
    shared_lengths: list[int]

    @property
    def clean(self) -> bool:
        """True when every statement splits exactly after the whole context."""
        return all(length == len(self.context_ids) for length in self.shared_lengths)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def split_statements(tokenizer, context: str, continuations: Sequence[str]) -> SplitStatements:
    """Tokenise ``context`` once and each ``context + continuation`` so that they agree.
    Raises ValueError when a statement would have no context token to condition on (an empty
    context with a tokenizer that has no BOS token): its first token cannot be scored."""
    stripped = context.rstrip()
    tails = [move_trailing_whitespace(context, c)[1] for c in continuations]
    context_ids = token_ids(tokenizer, stripped)
    wholes = batch_token_ids(tokenizer, [stripped + tail for tail in tails])
    continuation_ids, shared_lengths = [], []
    for whole, continuation in zip(wholes, tails, strict=True):
        # A continuation that adds no token (e.g. empty) keeps the last token scored.
        shared = min(common_prefix_length(context_ids, whole), len(whole) - 1)
        if shared < 1:
            raise ValueError(f"cannot score {continuation!r} after an empty context: the tokenizer has no BOS token "
                             "to condition the first token on")
        continuation_ids.append(list(whole[shared:]))
        shared_lengths.append(shared)
    return SplitStatements(context_ids, continuation_ids, shared_lengths)
