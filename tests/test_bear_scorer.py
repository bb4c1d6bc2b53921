"""The shared-prefix scorer equals one full forward pass per whole statement."""

from __future__ import annotations

import numpy as np
import pytest

from deer.backends.boundary import move_trailing_whitespace, split_statements
from deer.backends.clm_scorer import SharedPrefixScorer
from deer.backends.plain import plain_conditional_scores, statement_ids_and_start
from deer.backends.tokenization import token_ids
from deer.platform.templates import PromptTemplates
from kg_data import build_queries, load_kg

CONTEXT = "(dog, hypernym, mammal)\n(cat, hypernym, animal)\n(oak, hypernym,"
CANDIDATES = [" tree)", " plant)", " woody plant)", " x)", " Paris)", " the capital of France)", " 's)"]


def test_move_trailing_whitespace():
    assert move_trailing_whitespace("The capital is ", "Paris.") == ("The capital is", " Paris.")
    assert move_trailing_whitespace("", "Paris.") == ("", "Paris.")


def test_split_is_the_whole_statement_tokenisation(tiny_clm):
    _, tokenizer = tiny_clm
    split = split_statements(tokenizer, CONTEXT, CANDIDATES)
    for continuation, ids, shared in zip(CANDIDATES, split.continuation_ids, split.shared_lengths, strict=True):
        assert split.context_ids[:shared] + ids == token_ids(tokenizer, CONTEXT + continuation)
    assert split.context_ids[0] == tokenizer.bos_token_id  # BOS handled explicitly


def test_split_handles_a_token_straddling_the_boundary(tiny_clm):
    _, tokenizer = tiny_clm
    # " hel" + "lo" is one token " hello" in the whole statement.
    split = split_statements(tokenizer, "x hel", ["lo", " ghi"])
    assert split.shared_lengths[0] < len(split.context_ids)
    assert split.shared_lengths[1] == len(split.context_ids)
    for continuation, ids, shared in zip(["lo", " ghi"], split.continuation_ids, split.shared_lengths, strict=True):
        assert split.context_ids[:shared] + ids == token_ids(tokenizer, "x hel" + continuation)


layouts = pytest.mark.parametrize("layout", SharedPrefixScorer.LAYOUTS)


@layouts
@pytest.mark.parametrize("budget", [2048, 6])
def test_shared_prefix_equals_plain_on_tiny_model(tiny_clm, budget, layout):
    model, tokenizer = tiny_clm
    scorer = SharedPrefixScorer(model, tokenizer, token_budget=budget, layout=layout)
    fast = scorer.score_texts(CONTEXT, CANDIDATES)
    plain = plain_conditional_scores(model, tokenizer, CONTEXT, CANDIDATES)
    np.testing.assert_allclose(fast, plain, atol=1e-4, rtol=0)
    # Work: context once, then all continuation tokens but the last of each (packed), or each
    # distinct continuation prefix once (trie).
    split = split_statements(tokenizer, CONTEXT, CANDIDATES)
    assert scorer.stats.context_tokens == len(split.context_ids)
    assert scorer.stats.continuation_tokens == sum(len(c) - 1 for c in split.continuation_ids)
    fed = scorer.stats.continuation_tokens if layout == "packed" else scorer.stats.trie_nodes
    assert scorer.stats.tokens == scorer.stats.context_tokens + fed


def test_candidate_trie_feeds_each_continuation_prefix_once(tiny_clm):
    """Inputs are every continuation token but the last; the trie feeds each distinct prefix of them once."""
    model, tokenizer = tiny_clm
    candidates = CANDIDATES + [" the capital of Germany)", " woody tree)", " tree)"]
    scorer = SharedPrefixScorer(model, tokenizer, layout="trie")
    scorer.score_texts(CONTEXT, candidates)
    split = split_statements(tokenizer, CONTEXT, candidates)
    prefixes = {tuple(ids[: k + 1]) for ids in split.continuation_ids for k in range(len(ids) - 1)}
    assert scorer.stats.trie_nodes == len(prefixes) < scorer.stats.continuation_tokens


def test_unknown_layout_is_refused(tiny_clm):
    with pytest.raises(ValueError, match="layout"):
        SharedPrefixScorer(*tiny_clm, layout="tree")


@layouts
def test_straddling_boundary_equals_plain(tiny_clm, layout):
    model, tokenizer = tiny_clm
    scorer = SharedPrefixScorer(model, tokenizer, layout=layout)
    continuations = ["lo", " ghi", "lo world)", "icopter"]
    np.testing.assert_allclose(
        scorer.score_texts("x hel", continuations), plain_conditional_scores(model, tokenizer, "x hel", continuations), atol=1e-4
    )


def test_empty_context_scores_from_bos(tiny_clm):
    model, tokenizer = tiny_clm
    continuations = ["Paris is in France.", "Berlin is in France."]
    fast = SharedPrefixScorer(model, tokenizer).score_texts("", continuations)
    np.testing.assert_allclose(fast, plain_conditional_scores(model, tokenizer, "", continuations), atol=1e-4)


def test_plain_reference_locates_continuation_tokens(tiny_clm):
    _, tokenizer = tiny_clm
    ids, start = statement_ids_and_start(tokenizer, "(oak, hypernym, ", "tree)")
    assert ids[:start] == token_ids(tokenizer, "(oak, hypernym,")
    assert tokenizer.decode(ids[start:]) == " tree)"


@layouts
def test_shared_prefix_equals_plain_on_smollm2(smollm2, tiny_kg_dir, layout):
    """Real model: 3 queries x 4 candidates, DEER few-shot query text, 1e-4 per statement."""
    model, tokenizer = smollm2
    kg = load_kg(str(tiny_kg_dir))
    queries = build_queries(kg, "test")
    templates = PromptTemplates(k_shot=3)
    scorer = SharedPrefixScorer(model, tokenizer, token_budget=64, layout=layout)
    for triple in queries.triples[:3].tolist():
        context = templates.query_context(kg, tuple(triple))
        continuations = [templates.continuation(kg, t) for t in (4, 6, 9, 10)]
        fast = scorer.score_texts(context, continuations)
        plain = plain_conditional_scores(model, tokenizer, context, continuations)
        np.testing.assert_allclose(fast, plain, atol=1e-4, rtol=0)


def test_query_continuation_tokenisation_on_wn18rr_names(smollm2):
    """Query + continuation tokens == whole statement tokens, for many real WN18RR names."""
    _, tokenizer = smollm2
    try:
        kg = load_kg("wn18rr")
    except Exception as error:  # noqa: BLE001 - the data set is optional on some machines
        pytest.skip(f"WN18RR not available: {error}")
    templates = PromptTemplates(k_shot=2)
    rng = np.random.default_rng(0)
    test = kg.triples("test")
    tails = rng.choice(kg.n_entities, size=2000, replace=False)
    for triple in test[rng.choice(len(test), size=5, replace=False)].tolist():
        context = templates.query_context(kg, tuple(triple))
        continuations = [templates.continuation(kg, t) for t in tails]
        split = split_statements(tokenizer, context, continuations)
        assert split.clean
        wholes = [token_ids(tokenizer, context + c) for c in continuations]
        assert [split.context_ids + ids for ids in split.continuation_ids] == wholes
