"""The token boundary between a shared context (query text) and scored continuations.

Whitespace at the end of the context belongs to the continuation (" Paris", as lm-evaluation-harness
assumes).  A continuation's ids are its whole statement's after the longest prefix shared with the
context's; a token straddling the boundary starts the continuation: lm-pub-quiz's conditional score.
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
    """Token ids of one context (BOS first) and of continuations that follow it:
    ``context_ids[:shared_lengths[i]] + continuation_ids[i]`` is statement i's whole tokenisation
    (``shared_lengths[i]`` >= 1, ``continuation_ids[i]`` never empty)."""

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
    """Tokenise ``context`` once and each ``context + continuation`` so that they agree; ValueError where a
    statement has no context token to condition on (an empty context, no BOS token)."""
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
