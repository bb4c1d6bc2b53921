"""The encoder's shared-prefix path equals one whole forward pass per prompt.

Query prompts with one few-shot block for all (the authors' template style) share a long token
prefix; the encoder runs it once and packs the prompts' tails after it.  Checked on every
architecture and attention back-end of the equivalence suite (sliding windows shorter than the
prefix included), for the last-token states (1e-5 relative) and LAMA's next-token log-probs
(1e-4 nats), with duplicate prompts, a tail of one token, and packs split by a small budget.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deer.backends import shared_prefix
from deer.backends.encoder import PromptEOLEncoder
from deer.backends.plain import plain_last_state, plain_logprobs
from deer.backends.shared_prefix import MIN_SHARED_TOKENS, prefix_groups
from deer.backends.tokenization import batch_token_ids
from tests.tiny_models import ARCHITECTURES, BACKENDS, SCORE_ATOL, VECTOR_RTOL, relative_error, tiny_model

FEW_SHOT = "(dog, hypernym, mammal)\n(paris, capital of, france)\n(oak, has part, leaf)\n(cat, hypernym, feline)\n"
TAILS = ["berlin - the capital of Germany\n(berlin, capital of, ", "oak - a tree\n(oak, hypernym, ", "x",
         "tree - a tall perennial woody plant with a trunk\n(tree, has part, ", "oak - a tree\n(oak, hypernym, "]
PROMPTS = [FEW_SHOT + tail for tail in TAILS]


OTHER_BLOCK = "(oak, has part, leaf)\n(dog, hypernym, mammal)\n(paris, capital of, france)\n(cat, hypernym, feline)\n"
# Two few-shot blocks (as when a query's own (head, relation) is among the shared examples), a
# prompt sharing only the first example line, and one sharing nothing.
MIXED = PROMPTS + [OTHER_BLOCK + tail for tail in TAILS[:3]] + ["(dog, hypernym, mammal)\n(tree, has part, leaf)\n(oak,", "x y z"]


def _shared(ids, members):
    first = ids[members[0]]
    return next((k for k in range(len(first)) if any(len(ids[m]) <= k or ids[m][k] != first[k] for m in members)), len(first))


def test_prompts_are_grouped_by_their_shared_prefix(tokenizer):
    ids = batch_token_ids(tokenizer, PROMPTS)
    assert len({tuple(i) for i in ids}) == len(PROMPTS) - 1  # one duplicate (the encoder sends it once)
    groups, rest = prefix_groups(ids)
    assert [sorted(members.tolist()) for _, members in groups] == [list(range(len(PROMPTS)))] and not len(rest)
    assert groups[0][0] >= MIN_SHARED_TOKENS
    groups, rest = prefix_groups([[1, 2, 3], [1, 2, 4], [5]], min_shared=1)
    assert [(shared, m.tolist()) for shared, m in groups] == [(2, [0, 1])] and rest.tolist() == [2]
    mixed = batch_token_ids(tokenizer, MIXED)
    groups, rest = prefix_groups(mixed)
    assert sorted(sorted(m.tolist()) for _, m in groups) == [list(range(5)), [5, 6, 7]]
    assert sorted(rest.tolist()) == [8, 9]
    for shared, members in groups:  # the whole shared prefix, each member keeping a token of its own
        assert shared == min(_shared(mixed, members), min(len(mixed[m]) for m in members) - 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_shared_prefix_equals_one_pass_per_prompt(name, backend, tokenizer, monkeypatch):
    model = tiny_model(name, backend, tokenizer)
    ids = batch_token_ids(tokenizer, PROMPTS)
    next_ids = np.asarray([0, 5, 100, 2000])
    plain = np.stack([plain_last_state(model, i) for i in ids])
    plain_next = np.stack([plain_logprobs(model, i)[-1, torch.as_tensor(next_ids)].numpy() for i in ids])
    monkeypatch.setattr(shared_prefix, "PACK_TOKENS", 12)  # several packs
    encoder = PromptEOLEncoder(model, tokenizer, show_progress=False)
    output = encoder.encode(PROMPTS, next_token_ids=next_ids)
    assert encoder.stats.prefix_tokens == prefix_groups(ids)[0][0][0]  # the prefix ran, once
    assert encoder.stats.duplicate_prompts == 1
    assert max(relative_error(output.embeddings[r], plain[r]) for r in range(len(PROMPTS))) < VECTOR_RTOL
    assert np.abs(output.next_token_logprobs - plain_next).max() < SCORE_ATOL
    whole = PromptEOLEncoder(model, tokenizer, show_progress=False, reuse_prefix=False)
    assert whole.encode(PROMPTS).embeddings.shape == output.embeddings.shape and whole.stats.prefix_tokens == 0


@pytest.mark.parametrize("name", ["llama", "gpt2", "gemma3"])
def test_several_prefix_groups_equal_one_pass_per_prompt(name, tokenizer):
    model = tiny_model(name, "sdpa", tokenizer)
    ids = batch_token_ids(tokenizer, MIXED)
    plain = np.stack([plain_last_state(model, i) for i in ids])
    encoder = PromptEOLEncoder(model, tokenizer, show_progress=False)
    vectors = encoder.encode(MIXED).embeddings
    groups, _ = prefix_groups(ids)
    assert encoder.stats.prefix_tokens == sum(shared for shared, _ in groups)
    assert max(relative_error(vectors[r], plain[r]) for r in range(len(MIXED))) < VECTOR_RTOL


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_the_cache_goes_by_the_keyword_this_transformers_takes(name, tokenizer, caplog):
    """transformers 5.25 warns on every ``past_key_values=`` (removed in 5.40: use ``cache``) and on reading
    ``output.past_key_values``; the toolkit passed and read it, so ``--shots shared`` and BEAR's shared-prefix
    scoring would break when 5.40 lands.  Both paths run here with deprecation warnings as errors and
    transformers' own log captured: neither speaks."""
    import logging
    import warnings

    import transformers

    from deer.backends.statement_scorer import StatementScorer

    model = tiny_model(name, "eager", tokenizer)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    transformers.logging.enable_propagation()
    try:
        with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="transformers"):
            warnings.simplefilter("error", FutureWarning)
            warnings.simplefilter("error", DeprecationWarning)
            ids = batch_token_ids(tokenizer, PROMPTS)
            packs = list(shared_prefix.hidden_after_prefix(model, ids[0][:-2], [ids[0][-2:], ids[1][-3:]]))
            scores = StatementScorer(model, tokenizer).score("(dog, hypernym,", [" mammal)", " tree)"])
    finally:
        transformers.logging.set_verbosity(verbosity)
        transformers.logging.disable_propagation()
    assert packs and np.isfinite(scores).all()
    deprecations = [record.getMessage() for record in caplog.records if "deprecat" in record.getMessage().lower()]
    assert not deprecations, deprecations
