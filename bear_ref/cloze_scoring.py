"""LAMA's first answer tokens and BEAR's whole-statement scores on a cloze benchmark (``kg_data.cloze``)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from deer.backends.boundary import split_statements
from deer.backends.statement_scorer import StatementScorer
from kg_data.cloze import statement, text_before_answer
from kg_data.task import Task

# The text around a mask that decides how a word in its place is tokenised: the whitespace and one character each side.
_BEFORE_SLOT = re.compile(r"\S?\s*\Z")
_AFTER_SLOT = re.compile(r"\A\s*\S?")
REFERENCE_SLOT = ("is ", " .")  # a LAMA template's "[X] is [Y] ." around the mask: where a word's tokens are counted


def mask_slot(tokenizer, sentence: str) -> tuple[str, str]:
    """The text around the mask of ``sentence`` that decides the tokens of a word filling it."""
    before, _, after = sentence.partition(tokenizer.mask_token)
    return _BEFORE_SLOT.search(before).group(), _AFTER_SLOT.search(after).group()


def slot_tokens(tokenizer, labels: Sequence[str], slot: tuple[str, str] = REFERENCE_SLOT) -> list[list[int] | None]:
    """Each label's tokens in ``slot[0] + label + slot[1]`` from the mask's position in ``slot[0] + mask + slot[1]``
    up to the text after the mask's tokens; None where the tokens before the mask change (no token of its own)."""
    before, after = slot
    masked = tokenizer(before + tokenizer.mask_token + after, add_special_tokens=False)["input_ids"]
    if masked.count(tokenizer.mask_token_id) != 1:
        raise ValueError(f"the text {before + tokenizer.mask_token + after!r} does not tokenise to one mask token")
    position = masked.index(tokenizer.mask_token_id)
    tail = masked[position + 1:]
    filled = tokenizer([before + label + after for label in labels], add_special_tokens=False)["input_ids"]
    tokens: list[list[int] | None] = []
    for ids in filled:
        if ids[:position] != masked[:position]:
            tokens.append(None)
        else:
            clean = tail and len(ids) >= position + len(tail) and ids[len(ids) - len(tail):] == tail
            tokens.append(ids[position:len(ids) - len(tail)] if clean else ids[position:])
    return tokens


def answer_tokens(tokenizer, labels: Sequence[str], masked: bool) -> list[list[int]]:
    """Each answer's tokens where it stands in LAMA's "[X] is [Y] .": a causal LM's as the statement has them after
    "is" (SentencePiece's "▁Paris", not a lone "▁"), a masked LM's as the label fills the mask."""
    if masked:
        return [[] if ids is None else ids for ids in slot_tokens(tokenizer, labels)]
    return split_statements(tokenizer, REFERENCE_SLOT[0], labels).continuation_ids


def answer_token_ids(tokenizer, labels: Sequence[str], masked: bool, slot: tuple[str, str] = REFERENCE_SLOT) -> np.ndarray:
    """int64: each answer's first token (``answer_tokens``); a masked LM's at the mask with the text ``slot`` around it."""
    if masked:
        encoded = slot_tokens(tokenizer, labels, slot)
        for label, ids in zip(labels, encoded, strict=True):
            if ids is None:
                raise ValueError(f"the answer {label!r} has no token of its own at the mask of "
                                 f"{slot[0] + tokenizer.mask_token + slot[1]!r}: "
                                 "in that place it joins the text before it; LAMA cannot read it at the mask")
    else:
        encoded = answer_tokens(tokenizer, labels, masked)
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("an answer label tokenises to nothing")
    return np.asarray([ids[0] for ids in encoded], dtype=np.int64)


def single_token_words(tokenizer, words: Sequence[str], masked: bool) -> list[str]:
    """The words that are one token (not the unknown token) where they stand in "[X] is [Y] ." (LAMA's protocol)."""
    encoded = answer_tokens(tokenizer, words, masked)
    unknown = tokenizer.unk_token_id
    return [w for w, ids in zip(words, encoded, strict=True) if len(ids) == 1 and (unknown is None or ids[0] != unknown)]


def lama_vocabulary(tokenizer, words: Sequence[str], masked: bool) -> dict[str, str]:
    """{each of ``single_token_words``: the word whose candidate it is}.  A masked LM's candidates are token ids, as
    LAMA ranks them: words of one id (an uncased "Act" and "act") are one candidate, the first of them in ``words``."""
    kept = single_token_words(tokenizer, words, masked)
    ids = answer_token_ids(tokenizer, kept, masked).tolist() if masked else kept
    first: dict = {}
    return {word: first.setdefault(i, word) for word, i in zip(kept, ids, strict=True)}


def answer_slot(query) -> tuple[str, str, str]:
    """(the text before the answer right-stripped, the whitespace after it, the text after the answer): ``statement``
    is ``context + gap + answer + after`` wherever the answer does not come first (a first answer is capitalised)."""
    before = text_before_answer(query)
    context = before.rstrip()
    return context, before[len(context):], statement(query, "")[len(before):]


def statement_scores(scorer: StatementScorer, task: Task, indices: Sequence[int],
                     progress: Callable[[int], object] | None = None) -> dict[int, np.ndarray]:
    """Whole-statement scores of every candidate, per query index (float64 over its candidate set)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i in indices:
        q = task.queries[i]
        groups[(q.relation, q.mode, q.template_index, q.candidates)].append(i)
    scores = {}
    for members in groups.values():
        labels = task.candidate_set(task.queries[members[0]]).labels
        statements = [statement(task.queries[i], label) for i in members for label in labels]
        values = np.asarray(scorer.score_statements(statements, progress), dtype=np.float64).reshape(len(members), len(labels))
        scores.update(zip(members, values, strict=True))
    return scores


def count_statements(task: Task, indices: Sequence[int]) -> int:
    return sum(len(task.candidate_set(task.queries[i])) for i in indices)
