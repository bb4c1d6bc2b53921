"""Every optimised path equals the plain path, on many architectures and attention back-ends.

Plain path = the plain backend (``deer.backends.plain``): one whole forward pass per prompt or
statement, no padding, no custom mask, logits from the model's own forward.  Optimised paths:

* batched PromptEOL encoder (length-sorted, right-padded batches): last-token states;
* LAMA next-token log-probs (encoder's LM head on the selected rows only);
* shared-prefix scorer (context cache + packed continuations, custom 4-D mask);
* shared-prefix scorer with the continuations in a trie (context cache + trie mask);
* prefix-trie scorer (tree mask, position id = depth).

Tiny random models of each family, all with the bundled SmolLM2 tokenizer, under eager and
SDPA attention.  The families cover what breaks custom masks: learned positions (GPT-2, OPT),
OPT's projection (``word_embed_proj_dim`` != ``hidden_size``, as OPT-350M), rotary (Llama,
Qwen2, GPT-NeoX), logit and attention soft-capping (Gemma-2, eager by default), and sliding
windows shorter than the statements (Gemma-2/3 per layer kind, Mistral on every layer).
Tolerances: 1e-5 relative (L2) for vectors, 1e-4 nats for scores.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deer.backends.attention import attention_windows, configured_backend
from deer.backends.clm_scorer import SharedPrefixScorer
from deer.backends.encoder import PromptEOLEncoder
from deer.backends.plain import plain_conditional_scores, plain_last_state, plain_logprobs, plain_statement_score
from deer.backends.tokenization import batch_token_ids
from deer.backends.trie_scorer import PrefixTrieScorer
from tests.tiny_models import (
    ARCHITECTURES,
    BACKENDS,
    SCORE_ATOL,
    VECTOR_RTOL,
    WINDOW,
    relative_error,
    tiny_model,
)

# Token budgets: one pack / trie row for everything, and many small ones.
SHARED_PREFIX_BUDGETS = (512, 3)
CANDIDATE_TRIE_BUDGETS = (512, 4)  # 4 nodes: every row splits the trie, long continuations get rows of their own
TRIE_BUDGETS = (512, 20)

CONTEXT = "(dog, hypernym, mammal)\n(paris, capital of, france)\n(oak, hypernym,"
CONTINUATIONS = [" tree)", " woody perennial plant)", " x)", " the capital of Germany)", " tree)", " plant) and more"]
# " Fran" + "ce" merge into " France": such statements share a shorter prefix of the context.
STRADDLING_CONTEXT = "(paris, capital of, Fran"
STRADDLING_CONTINUATIONS = ["ce)", "kfurt)", "cis)", " x)"]
# Continuations sharing prefixes (trie nodes fed once), after both context positions.
MERGING_CONTINUATIONS = [" the capital of France)", " the capital of Germany)", " the cat)", "ce)", "ce) and more", "kfurt)", " x)"]
STATEMENTS = [f"{a} is the capital of {c}." for a in ("Paris", "Berlin") for c in ("France", "Germany", "the Holy Roman Empire")] + [
    f"The capital of {c} is {a}." for a in ("Paris", "Rome") for c in ("France", "Italy")
] + ["The capital of France is Paris.", "The capital of France is Paris", "x"]
PROMPTS = [CONTEXT, CONTEXT + " tree)", "short", 'oak - a deciduous tree\nThis sentence: "oak" means in one word: "'] + STATEMENTS[:4]


# -- the four optimised paths, each as its largest deviation from the plain path -----------------
# (also read by benchmarks/fidelity_table.py, which prints the closing table of issue 9)


def encoder_error(model, tokenizer) -> float:
    """Largest relative L2 error of batched PromptEOL vectors against one pass per prompt."""
    encoder = PromptEOLEncoder(model, tokenizer, token_budget=64, max_batch_size=4, show_progress=False)
    batched = encoder.encode(PROMPTS).embeddings
    plain = np.stack([plain_last_state(model, ids) for ids in batch_token_ids(tokenizer, PROMPTS)])
    assert batched.shape == plain.shape  # OPT: the projected width, not config.hidden_size
    return max(relative_error(batched[row], plain[row]) for row in range(len(PROMPTS)))


def lama_error(model, tokenizer) -> float:
    """Largest |difference| (nats) of the encoder's next-token log-probs against a full forward pass."""
    token_ids = np.asarray(sorted({ids[0] for ids in batch_token_ids(tokenizer, CONTINUATIONS)} | {0, 5, 100}))
    encoder = PromptEOLEncoder(model, tokenizer, token_budget=64, max_batch_size=4, show_progress=False)
    logprobs = encoder.encode(PROMPTS, next_token_ids=token_ids).next_token_logprobs
    plain = np.stack([plain_logprobs(model, ids)[-1, torch.as_tensor(token_ids)].numpy() for ids in batch_token_ids(tokenizer, PROMPTS)])
    return float(np.abs(logprobs - plain).max())


def shared_prefix_error(model, tokenizer, budget: int, layout: str = "packed") -> tuple[float, str]:
    """Largest |difference| (nats) of shared-prefix scores (continuations packed, or in a trie) against
    whole statements, both the conditional score and the whole-statement score (also where a token
    straddles the context's end); back-end used."""
    scorer = SharedPrefixScorer(model, tokenizer, token_budget=budget, layout=layout)
    errors = []
    for context, continuations in ((CONTEXT, CONTINUATIONS), (STRADDLING_CONTEXT, STRADDLING_CONTINUATIONS),
                                   (STRADDLING_CONTEXT, MERGING_CONTINUATIONS)):
        conditional = scorer.score_texts(context, continuations)
        plain = plain_conditional_scores(model, tokenizer, context, continuations, batch_size=1)
        errors.append(np.abs(conditional - plain).max())
        whole = scorer.score_texts(context, continuations, whole=True)
        statements = batch_token_ids(tokenizer, [context + c for c in continuations])
        errors.append(np.abs(whole - [plain_statement_score(model, ids) for ids in statements]).max())
    return float(max(errors)), scorer.stats.attention


def candidate_trie_error(model, tokenizer, budget: int) -> tuple[float, str]:
    return shared_prefix_error(model, tokenizer, budget, layout="trie")


def trie_error(model, tokenizer, budget: int) -> tuple[float, str]:
    """Largest |difference| (nats) of prefix-trie statement scores against whole statements; back-end used."""
    scorer = PrefixTrieScorer(model, tokenizer, token_budget=budget)
    trie = scorer.score_texts(STATEMENTS)
    plain = np.asarray([plain_statement_score(model, ids) for ids in batch_token_ids(tokenizer, STATEMENTS)])
    return float(np.abs(trie - plain).max()), scorer.stats.attention


cases = pytest.mark.parametrize("backend", BACKENDS)
families = pytest.mark.parametrize("name", list(ARCHITECTURES))


def test_straddling_case_straddles(tokenizer):
    from deer.backends.boundary import split_statements

    split = split_statements(tokenizer, STRADDLING_CONTEXT, STRADDLING_CONTINUATIONS)
    assert len(set(split.shared_lengths)) > 1


def test_merging_case_merges_after_both_context_positions(tokenizer):
    """The candidate trie's case has shared continuation prefixes under two different shared lengths."""
    from deer.backends.boundary import split_statements

    split = split_statements(tokenizer, STRADDLING_CONTEXT, MERGING_CONTINUATIONS)
    firsts = {}
    for length, ids in zip(split.shared_lengths, split.continuation_ids, strict=True):
        firsts.setdefault(length, []).append(tuple(ids[:2]))
    assert len(firsts) > 1
    assert all(len(set(pairs)) < len(pairs) for pairs in firsts.values())


def test_sliding_windows_are_shorter_than_the_statements(tokenizer):
    """The windowed families really exercise the window (else the tests below prove nothing about it)."""
    shortest = min(len(ids) for ids in batch_token_ids(tokenizer, STATEMENTS[:-1]))
    assert shortest > WINDOW
    assert attention_windows(tiny_model("mistral", "sdpa", tokenizer)) == WINDOW
    assert attention_windows(tiny_model("gemma3", "sdpa", tokenizer)) == {"full_attention": None, "sliding_attention": WINDOW}
    assert attention_windows(tiny_model("llama", "sdpa", tokenizer)) is None


@families
@cases
def test_batched_encoder_equals_one_pass_per_prompt(name, backend, tokenizer):
    assert encoder_error(tiny_model(name, backend, tokenizer), tokenizer) < VECTOR_RTOL


@families
@cases
def test_lama_next_token_equals_full_forward(name, backend, tokenizer):
    assert lama_error(tiny_model(name, backend, tokenizer), tokenizer) < SCORE_ATOL


SCORER_CASES = [("shared-prefix", shared_prefix_error, budget) for budget in SHARED_PREFIX_BUDGETS] + [
    ("candidate-trie", candidate_trie_error, budget) for budget in CANDIDATE_TRIE_BUDGETS
] + [("prefix-trie", trie_error, budget) for budget in TRIE_BUDGETS]


@families
@cases
@pytest.mark.parametrize("scorer_error, budget", [case[1:] for case in SCORER_CASES],
                         ids=[f"{path}-{budget}" for path, _, budget in SCORER_CASES])
def test_likelihood_scorer_equals_plain(name, backend, scorer_error, budget, tokenizer):
    error, used = scorer_error(tiny_model(name, backend, tokenizer), tokenizer, budget)
    assert error < SCORE_ATOL
    assert used == backend


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_backend_without_custom_masks_is_switched_for_the_call(name, tokenizer):
    """A model configured for FlashAttention-2 (which ignores custom masks) is scored with SDPA,
    says so in the stats, and gets its configured back-end back afterwards."""
    model = tiny_model(name, "sdpa", tokenizer)
    plain = [plain_statement_score(model, ids) for ids in batch_token_ids(tokenizer, STATEMENTS)]
    plain_packed = plain_conditional_scores(model, tokenizer, CONTEXT, CONTINUATIONS, batch_size=1)
    model.config._attn_implementation_internal = "flash_attention_2"
    try:
        trie = PrefixTrieScorer(model, tokenizer, token_budget=20)
        scores = trie.score_texts(STATEMENTS)
        assert configured_backend(model) == "flash_attention_2"
        shared = SharedPrefixScorer(model, tokenizer, token_budget=3)
        packed = shared.score_texts(CONTEXT, CONTINUATIONS)
        assert configured_backend(model) == "flash_attention_2"
    finally:
        model.config._attn_implementation_internal = "sdpa"
    assert trie.stats.attention == shared.stats.attention == "sdpa"
    np.testing.assert_allclose(scores, plain, atol=SCORE_ATOL, rtol=0)
    np.testing.assert_allclose(packed, plain_packed, atol=SCORE_ATOL, rtol=0)
