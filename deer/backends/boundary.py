"""The token boundary between a shared context (query text) and scored continuations.

A whole statement ``context + continuation`` is what the model is said to score.  Likelihood
probes tokenise the context once and each continuation after it, so the two tokenisations
must meet where the whole-statement tokenisation puts the boundary:

* Whitespace at the end of the context belongs to the continuation (" Paris", not " " +
  "Paris"): BPE vocabularies attach a space to the following word, as lm-evaluation-harness
  also assumes.
* The context ids are ``token_ids(context)`` (BOS policy of ``deer.backends.tokenization``); each
  continuation's ids are the rest of ``token_ids(context + continuation)`` after the longest
  prefix it shares with them.  Normally that prefix is the whole context; if a token
  straddles the boundary (a merge across it), the continuation starts at that token and
  follows a shorter prefix (``shared_lengths``).  That is lm-pub-quiz's conditional score:
  every token from the first one touching the answer to the end.
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
    ``context_ids[:shared_lengths[i]] + continuation_ids[i]`` is statement i's whole tokenisation.
    """

    context_ids: list[int]
    continuation_ids: list[list[int]]
    shared_lengths: list[int]

    @property
    def clean(self) -> bool:
        """True when every statement splits exactly after the whole context."""
        return all(length == len(self.context_ids) for length in self.shared_lengths)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def split_statements(tokenizer, context: str, continuations: Sequence[str]) -> SplitStatements:
    """Tokenise ``context`` once and each ``context + continuation`` so that they agree.

    Raises ValueError when a statement would have no context token to condition on (an empty
    context with a tokenizer that has no BOS token): its first token cannot be scored.
    """
    pairs = [move_trailing_whitespace(context, c) for c in continuations]
    stripped = pairs[0][0] if pairs else context.rstrip()
    context_ids = token_ids(tokenizer, stripped)
    wholes = batch_token_ids(tokenizer, [stripped + continuation for _, continuation in pairs])
    continuation_ids, shared_lengths = [], []
    for whole, (_, continuation) in zip(wholes, pairs, strict=True):
        shared = common_prefix_length(context_ids, whole)
        if shared == len(whole):  # continuation adds no token (e.g. empty): keep the last token scored
            shared = len(whole) - 1
        if shared < 1:
            raise ValueError(
                f"cannot score {continuation!r} after an empty context: the tokenizer has no BOS token "
                "to condition the first token on"
            )
        continuation_ids.append(list(whole[shared:]))
        shared_lengths.append(shared)
    return SplitStatements(context_ids, continuation_ids, shared_lengths)
