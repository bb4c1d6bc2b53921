"""DEER probe end to end on a tiny KG: outputs, cache reuse and resume, cache keys."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deer.cache import CacheKeyMismatch, EmbeddingStore
from deer.outputs import read_table
from deer.probe import open_model, run_deer_probe
from deer.ranking import cosine_gold_ranks
from deer.results import find_ranks_table
from deer.templates import PromptTemplates
from kg_data import build_queries
from kg_data.textual import load_textual_kg


@pytest.fixture()
def tiny_setup(tiny_kg_dir, tiny_clm_dir):
    kg = load_textual_kg(tiny_kg_dir)
    return kg, build_queries(kg, "test"), open_model(str(tiny_clm_dir))


def test_probe_writes_outputs_and_reuses_cache(tmp_path, tiny_setup):
    kg, queries, loaded = tiny_setup
    templates = PromptTemplates(k_shot=2)
    first = run_deer_probe(queries, loaded, templates, tmp_path / "run1", cache_dir=tmp_path / "cache", show_progress=False)
    assert first.metadata["cache"]["entities_encoded_now"] == 12
    table = read_table(find_ranks_table(tmp_path / "run1"))
    assert len(table) == 4 and {"deer_rank_raw", "deer_rank_filtered", "deer_top10", "tail_tokens"} <= set(table.columns)
    assert (table["deer_rank_filtered"] <= table["deer_rank_raw"]).all()
    assert table["tail"].tolist() == [kg.entity_names[t] for t in queries.triples[:, 2]]
    metrics = json.loads((tmp_path / "run1" / "metrics.json").read_text())["deer"]
    assert metrics["filtered"]["n"] == 4 and set(metrics["per_relation"]) == {"capital of", "hypernym"}
    metadata = json.loads((tmp_path / "run1" / "metadata.json").read_text())["deer"]
    assert metadata["templates"]["tail_template"].startswith("{name} - {description}")

    second = run_deer_probe(queries, loaded, templates, tmp_path / "run2", cache_dir=tmp_path / "cache", show_progress=False)
    assert second.metadata["cache"]["entities_encoded_now"] == 0
    assert second.metadata["cache"]["queries_encoded_now"] == 0
    assert np.array_equal(first.entity_embeddings, second.entity_embeddings)
    assert second.metrics["filtered"] == first.metrics["filtered"]

    uncached = run_deer_probe(queries, loaded, templates, tmp_path / "run3", use_cache=False, show_progress=False)
    assert np.allclose(uncached.entity_embeddings, first.entity_embeddings, rtol=1e-5, atol=1e-6)


def test_ranks_follow_from_embeddings(tmp_path, tiny_setup):
    _, queries, loaded = tiny_setup
    run = run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), tmp_path / "run", use_cache=False, show_progress=False)
    expected = cosine_gold_ranks(run.query_embeddings, run.entity_embeddings, queries.gold, queries.filter_tails)
    table = read_table(find_ranks_table(tmp_path / "run"))
    assert table["deer_rank_filtered"].tolist() == expected.filtered.tolist()


def test_store_resumes_after_interruption(tmp_path):
    key = {"model": "m", "template": "t"}
    store = EmbeddingStore(tmp_path, "entities", key)
    store.add(["a", "b"], np.ones((2, 3)))
    # A crash mid-write leaves only a temp file, which is ignored on reopen.
    (store.folder / ".part-xyz.npz").write_bytes(b"partial")
    reopened = EmbeddingStore(tmp_path, "entities", key)
    assert reopened.missing(["a", "b", "c"]) == [2]
    reopened.add(["c"], np.full((1, 3), 2.0))
    assert EmbeddingStore(tmp_path, "entities", key).get(["c", "a"]).tolist() == [[2, 2, 2], [1, 1, 1]]


def test_store_never_uses_a_mismatching_key(tmp_path):
    store = EmbeddingStore(tmp_path, "entities", {"model": "m"})
    (store.folder / "key.json").write_text(json.dumps({"kind": "entities", "model": "other"}))
    with pytest.raises(CacheKeyMismatch):
        EmbeddingStore(tmp_path, "entities", {"model": "m"})
    assert EmbeddingStore(tmp_path, "entities", {"model": "n"}).folder != store.folder


def test_different_template_or_model_gets_another_store(tmp_path, tiny_setup):
    from deer.probe import entity_store, query_store

    kg, _, loaded = tiny_setup
    assert query_store(loaded, kg, PromptTemplates(seed=0), tmp_path).folder != query_store(loaded, kg, PromptTemplates(seed=1), tmp_path).folder
    # The same weights reached by another path share the cache (the key names weights, not paths).
    link = tmp_path / "same-model-elsewhere"
    link.symlink_to(loaded.source, target_is_directory=True)
    other = open_model(str(link))
    assert other.source != loaded.source
    assert entity_store(other, kg, tmp_path).folder == entity_store(loaded, kg, tmp_path).folder
    other.fingerprint = "changed-weights"
    assert entity_store(other, kg, tmp_path).folder != entity_store(loaded, kg, tmp_path).folder


def test_atomic_writes_are_readable_files(tmp_path):
    import os
    import stat

    from deer.cache import atomic_write_bytes

    target = tmp_path / "out.json"
    atomic_write_bytes(target, b"{}")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"], "no temp file may be left behind"
