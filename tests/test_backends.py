"""The backend seam: the plain backend (one whole forward pass per prompt or statement) is the oracle,
and every probe run through the runner on the default backend gives its ranks and vectors.

Tiny random models of several families (tests/tiny_models.py builds them) under eager and SDPA
attention, on the tiny KG; tolerances as the equivalence suite's: 1e-5 relative for vectors."""

from __future__ import annotations

import numpy as np
import pytest

import bear_ref
import deer
from deer.backends import backend_names, open_backend
from deer.backends.models import as_loaded_model
from deer.base.errors import OptionError
from kg_data.load import load_kg
from kg_data.queries import build_queries
from tests.tiny_models import VECTOR_RTOL, tiny_model

FAMILIES = ["llama", "gpt2", "gemma3", "opt-proj"]


def _relative_error(a, b) -> float:
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


def test_the_built_in_backends_are_registered():
    assert backend_names()[:3] == ["hf", "plain", "vllm"]
    with pytest.raises(OptionError, match="backend='llamacpp': unknown backend; known: hf, plain, vllm"):
        deer.probe("wn18rr", ("model", "tokenizer"), backend="llamacpp")


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_probe_on_the_default_backend_equals_the_plain_backend(tiny_kg_dir, tokenizer, family, attention):
    loaded = as_loaded_model(tiny_model(family, attention, tokenizer), tokenizer)
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    for run in (deer.probe, bear_ref.bear, bear_ref.lama):
        fast, plain = (run(queries, loaded, k_shot=2, backend=name, show_progress=False) for name in ("hf", "plain"))
        assert plain.metadata["backend"] == "plain" and fast.metadata["backend"] == "hf"
        for column in (f"{fast.probe}_rank_raw", f"{fast.probe}_rank_filtered"):
            assert fast.table[column].tolist() == plain.table[column].tolist(), (run.__name__, column)
        for name, vectors in fast.arrays.items():
            assert _relative_error(vectors, plain.arrays[name]) < VECTOR_RTOL, (run.__name__, name)


def test_the_plain_backend_reads_and_writes_no_store(tiny_kg_dir, tokenizer, tmp_path):
    """It cannot cache: cache=True on it is refused by name (it would store nothing), cache=False stores nothing."""
    loaded = as_loaded_model(tiny_model("llama", "sdpa", tokenizer), tokenizer)
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    with pytest.raises(OptionError, match="cache.*the plain backend cannot cache"):
        deer.probe(queries, loaded, k_shot=2, backend="plain", cache=True, cache_dir=tmp_path / "cache", show_progress=False)
    deer.probe(queries, loaded, k_shot=2, backend="plain", cache=False, cache_dir=tmp_path / "cache", show_progress=False)
    assert not (tmp_path / "cache").exists()
    deer.probe(queries, loaded, k_shot=2, cache=True, cache_dir=tmp_path / "cache", show_progress=False)
    assert any((tmp_path / "cache").iterdir())  # the default backend does store


def test_plain_statement_scores_equal_the_shared_prefix_scorer(tokenizer):
    """The backends' statement scorers agree through the seam itself (context shared or not)."""
    loaded = as_loaded_model(tiny_model("qwen2", "sdpa", tokenizer), tokenizer)
    context, continuations = "(oak, hypernym,", [" tree)", " woody plant)", " x)"]
    fast, plain = (open_backend(name, loaded).statement_scorer() for name in ("hf", "plain"))
    np.testing.assert_allclose(fast.score(context, continuations), plain.score(context, continuations), atol=1e-4)
    statements = [context + c for c in continuations]
    np.testing.assert_allclose(fast.score_statements(statements), plain.score_statements(statements), atol=1e-4)
