"""PromptEOL encoder: the batched path equals the plain one-prompt-at-a-time path.

Tolerance: 1e-5 relative to the largest absolute hidden-state value (fp32 on CPU; batched
matrix products may sum in a different order, so bit-identity is not expected).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deer.backends.encoder import PromptEOLEncoder
from deer.backends.tokenization import token_ids

PROMPTS = [
    'dog - a domesticated carnivorous mammal\nThis sentence: "{word}" means in one word: "{one word}"\nThis sentence: "dog" means in one word: "',
    "(liguria, has part, genova)\n(seesaw, hypernym, move)\n(drill, has part,",
    "short",
    "The capital of France is",
    "a much longer prompt " * 12,
    "x",
]
RELATIVE_TOLERANCE = 1e-5


def plain_last_hidden_state(model, tokenizer, text: str) -> np.ndarray:
    """Reference: one prompt, full model with hidden states, last layer at the last token."""
    ids = torch.tensor([token_ids(tokenizer, text)])
    with torch.no_grad():
        output = model(input_ids=ids, output_hidden_states=True)
    return output.hidden_states[-1][0, -1].numpy()


def plain_next_token_logprobs(model, tokenizer, text: str) -> np.ndarray:
    ids = torch.tensor([token_ids(tokenizer, text)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
    return torch.log_softmax(logits.float(), dim=-1).numpy()


def _relative_error(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@pytest.mark.parametrize("model_fixture", ["tiny_clm", "smollm2"])
@pytest.mark.parametrize("token_budget", [64, 100000])
def test_batched_equals_one_by_one(request, model_fixture, token_budget):
    model, tokenizer = request.getfixturevalue(model_fixture)
    encoder = PromptEOLEncoder(model, tokenizer, token_budget=token_budget, show_progress=False)
    batched = encoder.encode(PROMPTS).embeddings
    alone = np.stack([plain_last_hidden_state(model, tokenizer, p) for p in PROMPTS])
    assert batched.shape == (len(PROMPTS), model.config.hidden_size)
    assert _relative_error(batched, alone) < RELATIVE_TOLERANCE
    # Each row must be its own prompt's vector: order restored after length sorting.
    assert np.argmax(np.abs(np.corrcoef(batched, alone)[: len(PROMPTS), len(PROMPTS) :]), axis=1).tolist() == list(range(len(PROMPTS)))


def test_next_token_logprobs_equal_full_lm_head(smollm2):
    model, tokenizer = smollm2
    wanted = np.array(tokenizer([" Paris", " Berlin", " dog"], add_special_tokens=False)["input_ids"])[:, 0]
    output = PromptEOLEncoder(model, tokenizer, show_progress=False).encode(PROMPTS, next_token_ids=wanted)
    plain = np.stack([plain_next_token_logprobs(model, tokenizer, p)[wanted] for p in PROMPTS])
    assert np.max(np.abs(output.next_token_logprobs - plain)) < 1e-4
    paris_row = PROMPTS.index("The capital of France is")
    assert np.argmax(output.next_token_logprobs[paris_row]) == 0, "SmolLM2 should prefer ' Paris'"


def test_bos_is_prepended_once(smollm2):
    _, tokenizer = smollm2
    ids = token_ids(tokenizer, "hello world")
    assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1


def test_stats_count_tokens(tiny_clm):
    model, tokenizer = tiny_clm
    encoder = PromptEOLEncoder(model, tokenizer, token_budget=32, show_progress=False)
    encoder.encode(PROMPTS)
    assert encoder.stats.prompts == len(PROMPTS)
    assert encoder.stats.tokens == sum(len(token_ids(tokenizer, p)) for p in PROMPTS)
    assert encoder.stats.padded_tokens >= encoder.stats.tokens


def test_batches_respect_budget_and_padding_limit():
    from deer.backends.batching import length_sorted_batches

    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 150, size=500)
    batches = length_sorted_batches(lengths, token_budget=2048, max_batch_size=64, max_padding=0.1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for batch in batches:
        padded = len(batch) * lengths[batch].max()
        assert len(batch) == 1 or padded <= 2048
        assert 1 - lengths[batch].sum() / padded <= 0.1 + 1e-12
    assert length_sorted_batches([5000, 3], token_budget=100)[0].tolist() == [0]
