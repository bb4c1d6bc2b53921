"""The BEAR length guard counts tokens, not bytes (bug 9); LAMA splits each query's first token at its
own context's boundary, not the first query's (bug 12)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bear_ref.lama_probe import first_token_ids
from deer.backends.boundary import split_statements
from deer.core.length_guard import PromptTooLongError, guard_prompt_lengths
from deer.core.models import as_loaded_model
from deer.core.templates import PromptTemplates
from kg_data.load import load_kg
from kg_data.queries import build_queries

FEW_TOKENS_MANY_BYTES = "internationalization" * 3  # 60 bytes, 6 tokens for SmolLM2
MANY_TOKENS_FEW_BYTES = "\U0001d518" * 4  # 16 bytes, 13 tokens for SmolLM2


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_the_statement_guard_finds_the_longest_continuation_in_tokens(tiny_kg_dir, tokenizer):
    """Bug 9: the guard took the longest continuation by UTF-8 bytes, so a short name of many tokens
    passed while its statement ran past the model's positions."""
    from transformers import LlamaConfig, LlamaForCausalLM

    kg = load_kg(tiny_kg_dir)
    names = list(kg.entity_names)
    names[2], names[3] = FEW_TOKENS_MANY_BYTES, MANY_TOKENS_FEW_BYTES
    queries = build_queries(dataclasses.replace(kg, entity_names=names), "test")
    templates = PromptTemplates(k_shot=0)
    continuation = [len(tokenizer(templates.continuation(queries.kg, e), add_special_tokens=False)["input_ids"]) for e in (2, 3)]
    assert continuation[0] < continuation[1] and len(FEW_TOKENS_MANY_BYTES.encode()) > len(MANY_TOKENS_FEW_BYTES.encode())
    context = max(len(tokenizer(templates.query_context(queries.kg, tuple(t)))["input_ids"]) for t in queries.triples.tolist())
    # Room for the byte-longest name's statement, not for the token-longest one's.
    limit = context + 2 + continuation[0] + 2
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=limit)).eval()
    loaded = as_loaded_model(model, tokenizer)
    with pytest.raises(PromptTooLongError, match="longest statement"):
        guard_prompt_lengths(queries, loaded, templates, "statements")
    guard_prompt_lengths(queries, loaded, templates, "contexts")  # the query texts alone fit


class _Contexts:
    """Templates whose query contexts end mid-word (a token can straddle the boundary there)."""

    contexts = ["(paris, capital of, Fran", "(oak, hypernym,", "(berlin, capital of, Fran", "(x, y, z"]

    def query_context(self, kg, triple):
        return self.contexts[triple[0]]

    def continuation(self, kg, tail):
        return ["ce)", "kfurt)", " x)", "cis)"][tail]


def test_lama_splits_each_query_at_its_own_context(tokenizer):
    """Bug 12: the first token was split against the first query's context only."""
    queries = SimpleNamespace(kg=None, candidates=np.arange(4), triples=np.array([[0, 0, 0], [1, 0, 1], [2, 0, 0], [3, 0, 3]]))
    templates = _Contexts()
    ids = first_token_ids(tokenizer, queries, templates)
    continuations = [templates.continuation(None, c) for c in range(4)]
    for q, context in enumerate(_Contexts.contexts):
        expected = [first[0] for first in split_statements(tokenizer, context, continuations).continuation_ids]
        assert ids[q].tolist() == expected, context
    assert ids[0].tolist() != ids[1].tolist()  # the straddling context really differs
