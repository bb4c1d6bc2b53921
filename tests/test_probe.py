"""DEER probe end to end on a tiny KG: outputs, cache reuse and resume, cache keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import deer
from deer.backends.models import open_model
from deer.base.files import read_table
from deer.base.vectors import normalize_rows
from deer.platform.result import find_ranks_table
from deer.platform.stores import CacheKeyMismatch, EmbeddingStore
from deer.platform.templates import PromptTemplates
from kg_data import build_queries
from kg_data.textual import load_textual_kg
from tests.ranking_oracle import rank_of


def run_deer_probe(queries, loaded, templates, out, cache_dir=None, use_cache=True, show_progress=False):
    """DEER through the public API, saved into ``out``."""
    return deer.probe(queries, loaded, templates=templates, cache=use_cache, cache_dir=cache_dir, out=out,
                      show_progress=show_progress)


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
    assert np.array_equal(first.arrays['entity_embeddings'], second.arrays['entity_embeddings'])
    assert second.metrics["filtered"] == first.metrics["filtered"]

    uncached = run_deer_probe(queries, loaded, templates, tmp_path / "run3", use_cache=False, show_progress=False)
    assert np.allclose(uncached.arrays['entity_embeddings'], first.arrays['entity_embeddings'], rtol=1e-5, atol=1e-6)


def test_ranks_follow_from_embeddings(tmp_path, tiny_setup):
    _, queries, loaded = tiny_setup
    run = run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), tmp_path / "run", use_cache=False, show_progress=False)
    scores = normalize_rows(run.arrays['query_embeddings']) @ normalize_rows(run.arrays['entity_embeddings']).T
    expected = [rank_of(row, gold, others) for row, gold, others in zip(scores, queries.gold, queries.filter_tails, strict=True)]
    table = read_table(find_ranks_table(tmp_path / "run"))
    assert table["deer_rank_filtered"].tolist() == expected


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
    with pytest.raises(CacheKeyMismatch) as refused:  # on every run, until the folder goes: the message says so
        EmbeddingStore(tmp_path, "entities", {"model": "m"})
    assert str(refused.value).startswith(f"{store.folder / 'key.json'}: ")
    assert f"remove the folder {store.folder}" in str(refused.value)
    assert EmbeddingStore(tmp_path, "entities", {"model": "n"}).folder != store.folder


def test_different_template_or_model_gets_another_store(tmp_path, tiny_setup):
    """One prompt store per model (weights, tokenizer, dtype, BOS) and special-token policy; inside it each
    vector is keyed by its prompt's text, so other templates are other keys."""
    from deer.embedding_probe import prompt_id, prompt_store
    from deer.platform.templates import query_prompts

    kg, queries, loaded = tiny_setup

    def store(model, templates):
        return prompt_store(model, tmp_path, templates.prompt_special_tokens).folder

    seeds = [{prompt_id(text) for text in query_prompts(queries, PromptTemplates(seed=seed))} for seed in (0, 1)]
    assert seeds[0] != seeds[1]  # other few-shot examples: other prompts, other keys
    # The same weights reached by another path share the cache (the key names weights, not paths).
    link = tmp_path / "same-model-elsewhere"
    link.symlink_to(loaded.source, target_is_directory=True)
    other = open_model(str(link))
    assert other.source != loaded.source
    templates = PromptTemplates()
    assert store(other, templates) == store(loaded, templates)
    other.fingerprint = "changed-weights"
    assert store(other, templates) != store(loaded, templates)
    # Tail prompts tokenised the authors' package's way are other vectors: never the same store.
    authors = PromptTemplates(style="authors")
    assert store(loaded, authors) != store(loaded, templates)


def test_atomic_writes_are_readable_files(tmp_path):
    import os
    import stat

    from deer.base.files import atomic_write_bytes

    target = tmp_path / "out.json"
    atomic_write_bytes(target, b"{}")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"], "no temp file may be left behind"


# -- run specs: one per run folder ---------------------------------------------------------------


def test_run_spec_round_trips_and_names_its_differences(tiny_setup):
    import dataclasses

    from deer.platform.run_spec import RunSpec

    kg, queries, loaded = tiny_setup
    spec = RunSpec.build(queries, loaded, PromptTemplates(k_shot=2))
    assert RunSpec.from_dict(json.loads(spec.to_json())) == spec and hash(RunSpec.from_dict(json.loads(spec.to_json()))) == hash(spec)
    assert spec.model_fingerprint == loaded.fingerprint and spec.dtype == "float32" and spec.kg_fingerprint == kg.fingerprint()
    assert spec.templates == json.loads(json.dumps(PromptTemplates(k_shot=2).to_metadata()))
    assert spec.bos["bos_token_id"] == loaded.tokenizer.bos_token_id
    other = RunSpec.build(queries, dataclasses.replace(loaded, dtype="bfloat16"), PromptTemplates(k_shot=3, shots="shared"))
    assert set(spec.differences(other)) == {"dtype", "templates.k_shot", "templates.shots"}
    assert spec.differences(other)["templates.k_shot"] == (2, 3)
    assert spec.differences(spec) == {}
    subset_spec = RunSpec.build(build_queries(kg, "test", subset=2, seed=1), loaded, PromptTemplates(k_shot=2))
    assert (subset_spec.subset, subset_spec.subset_seed) == (2, 1) and (spec.subset, spec.subset_seed) == (None, None)


def test_default_folder_names_are_readable_and_differ_per_spec(tiny_setup):
    import dataclasses

    from deer.platform.run_spec import RunSpec, run_folder_name

    kg, queries, loaded = tiny_setup

    def name(queries=queries, loaded=loaded, **template_options):
        return run_folder_name(kg.name, "HuggingFaceTB/SmolLM2-135M", RunSpec.build(queries, loaded, PromptTemplates(**template_options)))

    base = name(k_shot=2)
    assert base.startswith("tiny_kg-test-all-SmolLM2-135M-") and base == name(k_shot=2)
    variants = [
        name(k_shot=3), name(k_shot=2, shots="shared"), name(k_shot=2, query_trailing_space=True), name(k_shot=2, seed=1),
        name(loaded=dataclasses.replace(loaded, dtype="bfloat16"), k_shot=2),
        name(loaded=dataclasses.replace(loaded, fingerprint="other-weights"), k_shot=2),
        name(queries=build_queries(kg, "test", subset=2, seed=0), k_shot=2),
        name(queries=build_queries(kg, "test", subset=2, seed=1), k_shot=2),
    ]
    assert len({base, *variants}) == 1 + len(variants)
    assert variants[-1].startswith("tiny_kg-test-2-SmolLM2-135M-")
    # Not a KG run (the BEAR data set): the readable part alone.
    assert run_folder_name("BEAR-P36", "/models/tiny", split="dataset", subset=3) == "BEAR-P36-dataset-3-tiny"


def test_a_folder_refuses_probes_of_another_spec(tmp_path, tiny_setup):
    import dataclasses

    from deer.platform.result import Metrics, RunResult

    kg, queries, loaded = tiny_setup
    out = tmp_path / "run"
    first = run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), out, use_cache=False, show_progress=False)
    stored = json.loads((out / "run_spec.json").read_text())
    assert json.loads((out / "metadata.json").read_text())["deer"]["run_spec"] == stored == first.metadata["run_spec"]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for templates, other, field in [
        (PromptTemplates(k_shot=3), loaded, "templates.k_shot"),
        (PromptTemplates(k_shot=2, seed=1), loaded, "templates.seed"),
        (PromptTemplates(k_shot=2), dataclasses.replace(loaded, dtype="bfloat16"), "dtype"),
    ]:
        with pytest.raises(ValueError, match=rf"{field}: this run .*another --out") as error:
            run_deer_probe(queries, other, templates, out, use_cache=False, show_progress=False)
        assert str(out) in str(error.value)
    # A result without a spec (a data-set result) is refused too; nothing in the folder changed.
    with pytest.raises(ValueError, match="already holds a KG probe run"):
        RunResult.of_probe("bear", first.table, Metrics({}), {"probe": "bear"}, layout="instances").save(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # The same spec adds to the folder as before.
    run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), out, use_cache=False, show_progress=False)


def test_a_folder_without_a_spec_is_not_written_into(tmp_path, tiny_setup):
    _, queries, loaded = tiny_setup
    out = tmp_path / "old"
    run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), out, use_cache=False, show_progress=False)
    (out / "run_spec.json").unlink()  # as written before run specs existed
    with pytest.raises(ValueError, match="without a run spec"):
        run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), out, use_cache=False, show_progress=False)
    # A BEAR data-set folder (metrics and metadata of its own, no ranks table) is not merged into either.
    dataset_run = tmp_path / "bear-dataset"
    dataset_run.mkdir()
    (dataset_run / "metrics.json").write_text('{"bear": {"overall": {}}}')
    (dataset_run / "metadata.json").write_text('{"bear": {"probe": "bear-dataset"}}')
    with pytest.raises(ValueError, match="metadata.json, metrics.json written without a run spec"):
        run_deer_probe(queries, loaded, PromptTemplates(k_shot=2), dataset_run, use_cache=False, show_progress=False)
    assert json.loads((dataset_run / "metadata.json").read_text()) == {"bear": {"probe": "bear-dataset"}}


def test_cli_probe_subset_with_another_seed_gets_its_own_folder(tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    from click.testing import CliRunner

    from experiments.cli import main

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    common = ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2", "--subset", "2"]
    folders = []
    for seed in ("0", "1", "0"):
        result = CliRunner().invoke(main, [*common, "--seed", seed])
        assert result.exit_code == 0, result.output
        folders.append(result.output.strip().splitlines()[-1].removeprefix("results: "))
    assert folders[0] == folders[2] != folders[1]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(Path(f).name for f in folders[:2])
    for folder, seed in zip(folders[:2], (0, 1), strict=True):
        assert Path(folder).name.startswith(f"tiny_kg-test-2-{tiny_clm_dir.name}-")
        spec = json.loads((tmp_path / folder / "run_spec.json").read_text())
        assert spec["subset_seed"] == seed and spec["templates"]["seed"] == seed
    # One --out for both seeds: the second is refused with a clear message, not a traceback.
    out = ["--out", str(tmp_path / "shared")]
    assert CliRunner().invoke(main, [*common, "--seed", "0", *out]).exit_code == 0
    refused = CliRunner().invoke(main, [*common, "--seed", "1", *out])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "subset_seed: this run 1, the folder 0" in refused.output and "another --out" in refused.output


def test_the_python_api_caches_only_when_asked_and_never_on_a_training_identity(tmp_path, monkeypatch, tiny_setup):
    """Issue 22.8: the Python API writes nothing unless asked (cache=True reuses the stores as the CLI
    does); a model whose fingerprint is an identity given for it (a model in training) is never cached on."""
    import deer
    from deer.backends.fingerprints import training_identity
    from deer.backends.models import LoadedModel
    from deer.platform.validate import OptionError

    _, queries, loaded = tiny_setup
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    assert deer.probe(queries, loaded, k_shot=2, show_progress=False).metadata["cache"]["entity_store"] is None
    assert not (tmp_path / "cache").exists()
    first = deer.probe(queries, loaded, k_shot=2, cache=True, show_progress=False)
    in_memory = LoadedModel.from_objects(loaded.model, loaded.tokenizer)  # weights hashed: the same store
    second = deer.probe(queries, in_memory, k_shot=2, cache=True, show_progress=False)
    assert first.metadata["cache"]["entities_encoded_now"] == 12 and second.metadata["cache"]["entities_encoded_now"] == 0

    training = LoadedModel.from_objects(loaded.model, loaded.tokenizer, fingerprint=training_identity(loaded.model, 3))
    with pytest.raises(OptionError, match="does not hash its weights; nothing can be cached on it"):
        deer.probe(queries, training, k_shot=2, cache=True, show_progress=False)
