"""LAMA and BEAR scores on a cloze benchmark (``kg_data.cloze``): LAMA's first answer token after the
answer context (``answer_token_ids``; at a masked LM's mask the backend's ``mask_filler``), and whole
statements' log-likelihoods (``statement_scores``, grouped so the prefix trie reads shared prefixes once).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from deer.backends.statement_scorer import StatementScorer
from kg_data.cloze import statement
from kg_data.task import Task


def answer_tokens(tokenizer, labels: Sequence[str], masked: bool) -> list[list[int]]:
    """Each answer's tokens as it follows the context: " label" for a causal LM's BPE, "label" for
    a masked LM's word-piece vocabulary (no special tokens)."""
    return tokenizer(list(labels) if masked else [" " + label for label in labels], add_special_tokens=False)["input_ids"]


def answer_token_ids(tokenizer, labels: Sequence[str], masked: bool) -> np.ndarray:
    """int64: the first token of each answer as it follows the context (``answer_tokens``)."""
    encoded = answer_tokens(tokenizer, labels, masked)
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("an answer label tokenises to nothing")
    return np.asarray([ids[0] for ids in encoded], dtype=np.int64)


def single_token_words(tokenizer, words: Sequence[str], masked: bool) -> list[str]:
    """The words that are one token for this tokenizer (LAMA's single-token protocol); a word the
    tokenizer only knows as its unknown token is not one of them."""
    encoded = answer_tokens(tokenizer, words, masked)
    unknown = tokenizer.unk_token_id
    return [w for w, ids in zip(words, encoded, strict=True) if len(ids) == 1 and (unknown is None or ids[0] != unknown)]


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
