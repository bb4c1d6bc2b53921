"""The prefix-trie scorer equals one full forward pass per whole statement."""

from __future__ import annotations

import numpy as np
import pytest

from deer.backends.plain import plain_conditional_scores
from deer.backends.tokenization import batch_token_ids
from deer.backends.trie_scorer import PrefixTrieScorer, ancestor_mask, build_rows
from tests.tiny_models import whole_sequence_logprob

# [Y]-first and [Y]-last families, a duplicate, and a statement that is a prefix of another.
STATEMENTS = [
    f"{answer} is the capital of {country}." for answer in ("Paris", "Berlin", "Rome") for country in ("France", "Germany")
] + [f"The capital of {country} is {answer}." for answer in ("Paris", "Rome") for country in ("France", "Italy")] + [
    "The capital of France is Paris.",
    "The capital of France is Paris",
    "x",
]


def test_ancestor_mask_of_a_small_tree():
    #      0
    #     / \
    #    1   3
    #    |
    #    2
    mask = ancestor_mask(np.asarray([-1, 0, 1, 0]))
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, False, False, True],
    ]


def test_rows_share_prefixes_and_respect_the_budget():
    sequences = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [1, 2, 3, 4], [7, 8]]
    (row,) = build_rows(sequences, token_budget=100)
    assert row.tokens == [1, 2, 3, 4, 5, 6, 7, 8]  # each prefix once; the duplicate adds nothing
    assert sorted(row.statements) == [0, 1, 2, 3, 4]
    for index, path in zip(row.statements, row.paths, strict=True):
        assert [row.tokens[node] for node in path] == sequences[index]
    rows = build_rows(sequences, token_budget=4)
    assert all(len(r.tokens) <= 4 for r in rows)
    assert sorted(i for r in rows for i in r.statements) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("budget", [512, 7, 1])
def test_trie_equals_plain_on_tiny_model(tiny_clm, budget):
    model, tokenizer = tiny_clm
    scorer = PrefixTrieScorer(model, tokenizer, token_budget=budget)
    finished = []
    fast = scorer.score_texts(STATEMENTS, progress=finished.append)
    assert sum(finished) == len(STATEMENTS) and len(finished) == scorer.stats.rows
    plain = plain_conditional_scores(model, tokenizer, "", STATEMENTS)
    np.testing.assert_allclose(fast, plain, atol=1e-4, rtol=0)
    if budget == 512:  # one row: every distinct prefix that has an extension is fed once
        sequences = batch_token_ids(tokenizer, STATEMENTS)
        prefixes = {tuple(ids[:n]) for ids in sequences for n in range(1, len(ids))}
        assert scorer.stats.rows == 1 and scorer.stats.fed_tokens == len(prefixes)


def test_trie_scores_sequences_without_a_shared_root(tiny_clm):
    """A vocabulary without BOS gives a forest: each first token is given, the rest scored."""
    model, tokenizer = tiny_clm
    sequences = [[5, 6, 7, 8], [5, 6, 9], [11, 6, 7], [11, 12]]
    fast = PrefixTrieScorer(model, tokenizer, token_budget=3).score_ids(sequences)
    np.testing.assert_allclose(fast, [whole_sequence_logprob(model, ids) for ids in sequences], atol=1e-4, rtol=0)


def test_trie_equals_plain_on_smollm2(smollm2):
    model, tokenizer = smollm2
    for budget in (512, 16):
        fast = PrefixTrieScorer(model, tokenizer, token_budget=budget).score_texts(STATEMENTS)
        plain = plain_conditional_scores(model, tokenizer, "", STATEMENTS)
        np.testing.assert_allclose(fast, plain, atol=1e-4, rtol=0)


def test_plain_conditional_scores_leave_a_first_token_without_a_bos_before_it_unscored(tiny_clm):
    """With a tokenizer that defines no BOS, plain_conditional_scores scored a statement's first token when it belongs
    to the continuation (an empty context, as benchmarks/bench_bear_dataset.py's plain sample calls it, or a first
    token straddling the context's end) from position -1: the logits after the row's last token (a Qwen2-style tiny
    model: -49.92 for a statement whose whole score is -43.34).  That token is context only now, as the README's rule
    and the whole-statement scorers have it: each equals the whole statement's score computed here."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    model, tokenizer = tiny_clm
    no_bos = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer.backend_tokenizer.to_str()),
                                     eos_token=tokenizer.eos_token)
    assert no_bos.bos_token_id is None
    statements = STATEMENTS[:-1]  # "x" is one token: nothing to score
    expected = [whole_sequence_logprob(model, no_bos(s, add_special_tokens=False)["input_ids"]) for s in statements]
    np.testing.assert_allclose(plain_conditional_scores(model, no_bos, "", statements), expected, atol=1e-4, rtol=0)
    straddling = [plain_conditional_scores(model, no_bos, s[:2], [s[2:]])[0] for s in statements]  # "Pa" + "ris is ..."
    np.testing.assert_allclose(straddling, expected, atol=1e-4, rtol=0)
    assert not np.allclose(expected, 0.0)  # not vacuous: the statements have scored tokens


def test_the_plain_backend_scores_a_one_token_statement_without_a_bos_as_the_trie_does(tiny_clm):
    """A statement of one token with no BOS before it (a tokenizer without one) has nothing to score: the trie gave 0,
    the plain backend (``--backend plain``, the cross-check) failed with torch's IndexError on an empty float index."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from deer.backends.plain import PlainStatementScorer

    model, tokenizer = tiny_clm
    no_bos = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer.backend_tokenizer.to_str()),
                                     eos_token=tokenizer.eos_token)
    statements = ["x", STATEMENTS[0]]
    assert len(no_bos("x", add_special_tokens=False)["input_ids"]) == 1
    trie = PrefixTrieScorer(model, no_bos).score_texts(statements)
    np.testing.assert_allclose(PlainStatementScorer(model, no_bos).score_statements(statements), trie, atol=1e-4, rtol=0)
    assert trie[0] == 0.0 and trie[1] != 0.0
