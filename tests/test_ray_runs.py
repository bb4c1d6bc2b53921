"""Scale-out on Ray gives the one-process results: a checkpoint series screened per task, and a
KG's entities encoded split over workers into one store.  Skipped only where Ray is not installed
(.ci/run installs it)."""

from __future__ import annotations

import numpy as np
import pytest

from deer.platform.templates import PromptTemplates
from experiments.runs import run_probes
from kg_data.load import load_kg
from kg_data.queries import build_queries

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install .[ray]; .ci/run installs it)")


@pytest.fixture()
def three_checkpoints(tiny_clm_dir, tmp_path):
    from tests.tiny_models import save_checkpoint

    for step in (1, 2, 3):
        save_checkpoint(tiny_clm_dir, tmp_path / "series", step)
    return [str(tmp_path / "series" / f"checkpoint-{step}") for step in (1, 2, 3)]


def test_a_series_on_ray_equals_the_sequential_screen(three_checkpoints, tiny_kg_dir, tmp_path):
    from experiments.ray_runs import run_probes_on_ray

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    templates = PromptTemplates()
    options = {"use_cache": False, "token_budget": None}
    sequential = [run_probes(queries, name, ["deer"], None, templates, runs_dir=tmp_path / "one", log=lambda *_: None, **options)
                  for name in three_checkpoints]
    on_ray = run_probes_on_ray(queries, three_checkpoints, ["deer"], templates, num_cpus=2, runs_dir=tmp_path / "ray", **options)
    assert [run.label for run in on_ray] == [run.label for run in sequential] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    for one, other in zip(sequential, on_ray, strict=True):
        for rank_type in ("filtered", "raw"):
            np.testing.assert_array_equal(one.ranks(rank_type, "deer"), other.ranks(rank_type, "deer"))
        assert other.folder.parent == (tmp_path / "ray").resolve()
    assert len({tuple(run.ranks("raw", "deer")) for run in sequential}) > 1  # the checkpoints differ


def test_entities_split_over_two_workers_make_the_one_process_store(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """Two local Ray workers each write their own shards; the store, and the ranks read from it, equal one
    process's.  A worker killed mid-shard leaves no index for it (the index is written last): the rerun
    encodes only that shard's prompts again and the ranks stay identical."""
    import deer
    from deer.backends.models import open_model
    from deer.embedding_probe import prompt_keys, prompt_store
    from experiments.ray_runs import encode_entities_on_ray
    from tests.store_faults import stored_parts

    kg = load_kg(tiny_kg_dir)
    templates = PromptTemplates()
    queries = build_queries(kg, "test")
    folder = encode_entities_on_ray(kg, str(tiny_clm_dir), templates, workers=2, cache_dir=tmp_path / "ray-cache",
                                    address=None, batch=6)
    one = deer.probe(queries, str(tiny_clm_dir), templates=templates, cache=True, cache_dir=tmp_path / "one-cache",
                     show_progress=False)
    loaded = open_model(str(tiny_clm_dir))
    split = prompt_store(loaded, tmp_path / "ray-cache", templates.prompt_special_tokens)
    single = prompt_store(loaded, tmp_path / "one-cache", templates.prompt_special_tokens)
    assert split.folder == folder and len(stored_parts(folder)) == 2  # one shard per batch of 6, written by the workers
    keys = prompt_keys([templates.tail_prompt(kg, e) for e in range(kg.n_entities)])
    assert split.missing(keys) == [] and single.missing(keys) == []
    np.testing.assert_allclose(split.get(keys), single.get(keys), rtol=1e-6, atol=1e-6)

    def ray_ranks():
        result = deer.probe(queries, str(tiny_clm_dir), templates=templates, cache=True, cache_dir=tmp_path / "ray-cache",
                            show_progress=False)
        assert result.metadata["cache"]["entities_encoded_now"] == 0
        return result.table[["deer_rank_raw", "deer_rank_filtered"]]

    assert ray_ranks().equals(one.table[["deer_rank_raw", "deer_rank_filtered"]])
    shards = len(stored_parts(folder))  # the two of the entities and one of the queries the probe encoded
    again = encode_entities_on_ray(kg, str(tiny_clm_dir), templates, workers=2, cache_dir=tmp_path / "ray-cache", batch=6)
    assert again == folder and len(stored_parts(folder)) == shards  # nothing missing: no task, no new shard

    stored_parts(folder)[0].unlink()  # a worker killed after writing a shard's vectors, before its index
    assert len(prompt_store(loaded, tmp_path / "ray-cache", templates.prompt_special_tokens).missing(keys)) == 6
    encode_entities_on_ray(kg, str(tiny_clm_dir), templates, workers=2, cache_dir=tmp_path / "ray-cache", batch=6)
    assert len(stored_parts(folder)) == shards and ray_ranks().equals(one.table[["deer_rank_raw", "deer_rank_filtered"]])


def test_a_worker_process_killed_mid_run_is_redone_and_the_ranks_stay_identical(tiny_clm_dir, tiny_kg_dir, tmp_path, monkeypatch):
    """A real death, not a simulated one: the first batch any worker takes kills that worker's process
    (``os._exit``) before it writes anything.  Ray restarts the actor, the driver hands the batch out again,
    and the store and the ranks equal one process's."""
    import deer
    from deer.platform.validate import DeerWarning
    from experiments import ray_runs
    from tests import ray_killing_worker

    ray.cloudpickle.register_pickle_by_value(ray_killing_worker)  # the workers need not import the tests package
    monkeypatch.setattr(ray_killing_worker.KillingWorker, "marker", str(tmp_path / "killed"))
    monkeypatch.setattr(ray_runs, "_EncodingWorker", ray_killing_worker.KillingWorker)
    kg, templates = load_kg(tiny_kg_dir), PromptTemplates()
    queries = build_queries(kg, "test")
    with pytest.warns(DeerWarning, match=r"a Ray worker failed .*the 6 entity prompts it left were encoded again .*all 12 "
                                         r"are in the store, which is whole"):
        ray_runs.encode_entities_on_ray(kg, str(tiny_clm_dir), templates, workers=2, cache_dir=tmp_path / "ray-cache", batch=6)
    assert (tmp_path / "killed").exists(), "no worker was killed: the test would prove nothing"
    columns = ["deer_rank_raw", "deer_rank_filtered"]
    after_kill = deer.probe(queries, str(tiny_clm_dir), templates=templates, cache=True, cache_dir=tmp_path / "ray-cache",
                            show_progress=False)
    one = deer.probe(queries, str(tiny_clm_dir), templates=templates, cache=False, show_progress=False)
    assert after_kill.metadata["cache"]["entities_encoded_now"] == 0  # the Ray workers encoded every entity
    assert after_kill.table[columns].equals(one.table[columns])


def test_ray_encoding_takes_its_loading_as_an_object_and_refuses_a_stray_keyword(tiny_kg_dir, monkeypatch):
    """``encode_entities_on_ray`` takes ``loading=ModelLoading(...)`` (or ``dtype=``/``device=`` loose), and a keyword
    it has no use for is refused by name before any model loads or Ray starts."""
    from deer.backends import models
    from deer.base.errors import OptionError
    from deer.platform.run_options import ModelLoading
    from experiments.ray_runs import encode_entities_on_ray

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    kg = load_kg(tiny_kg_dir)
    with pytest.raises(OptionError, match="dtype.*given beside loading="):
        encode_entities_on_ray(kg, "smollm2-135m", PromptTemplates(), loading=ModelLoading(), dtype="float16")
    with pytest.raises(OptionError, match="tokens_budget"):
        encode_entities_on_ray(kg, "smollm2-135m", PromptTemplates(), tokens_budget=8)


def test_ray_encoding_refuses_a_prompt_the_model_cannot_take_before_any_worker_starts(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """A tail prompt longer than the model's positions is refused by name on the driver, before Ray starts
    (a worker would otherwise feed it to the model, or fail and be retried, before the run's guard saw it)."""
    from deer.platform.length_guard import PromptTooLongError
    from experiments import ray_runs

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray_runs, "ray_session", no_ray)
    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000
    (tiny_kg_dir / "entities.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(PromptTooLongError, match=r"entity 'e2' \('animal'\): its tail prompt is \d+ tokens, more than the model's 2048"):
        ray_runs.encode_entities_on_ray(load_kg(tiny_kg_dir), str(tiny_clm_dir), PromptTemplates(), workers=2,
                                        cache_dir=tmp_path / "cache")
    assert not list(tmp_path.rglob("*.npy"))  # nothing was encoded


def test_ray_workers_encode_the_cut_descriptions_the_run_then_reads(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """`deer probe --ray-workers 2 --long-prompts truncate-descriptions`: the workers encode the description cut as
    the run cuts it, so the run finds every entity's vector in the store and encodes none itself."""
    import json

    from click.testing import CliRunner

    from experiments.cli import main

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000
    (tiny_kg_dir / "entities.tsv").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--ray-workers", "2",
                                       "--k-shot", "2", "--long-prompts", "truncate-descriptions", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    metadata = json.loads((tmp_path / "run" / "metadata.json").read_text())["deer"]
    assert list(metadata["length_guard"]["truncated_descriptions"]) == ["e2"]
    assert metadata["cache"]["entities_encoded_now"] == 0 and metadata["cache"]["entities_from_cache"] == 12


BAD_RAY_ADDRESSES = ["not a host:xx", "host:", "host:99999", "ray://:10001", "10.0.0.5", 6379]
GOOD_RAY_ADDRESSES = ["auto", "local", "10.0.0.5:6379", "head-node.cluster:6379", "ray://10.0.0.5:10001", "[::1]:6379",
                      "http://127.0.0.1:8265"]


@pytest.mark.parametrize("address", BAD_RAY_ADDRESSES)
def test_a_malformed_ray_address_is_refused_before_any_model_loads(address, tiny_kg_dir, monkeypatch):
    """`--ray-address "not a host:xx"` was found after the model had loaded, by Ray's "Unable to parse port number",
    which names no option.  Each entry that takes an address refuses it first, naming it."""
    from click.testing import CliRunner

    from deer.backends import models
    from deer.base.errors import OptionError
    from experiments.cli import main
    from experiments.ray_runs import check_ray_address, encode_entities_on_ray, run_probes_on_ray

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    kg = load_kg(tiny_kg_dir)
    for call in (lambda: check_ray_address(address),
                 lambda: encode_entities_on_ray(kg, "smollm2-135m", PromptTemplates(), address=address),
                 lambda: run_probes_on_ray(build_queries(kg, "test"), ["smollm2-135m"], ["deer"], PromptTemplates(),
                                           address=address)):
        with pytest.raises(OptionError, match=r"ray_address=.*not a Ray address"):
            call()
    if isinstance(address, str):
        result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", "smollm2-135m", "--ray-workers", "2",
                                           "--ray-address", address])
        assert result.exit_code == 1 and f"--ray-address {address}: not a Ray address" in result.output, result.output


@pytest.mark.parametrize("address", GOOD_RAY_ADDRESSES)
def test_the_addresses_ray_takes_pass_the_check(address):
    from experiments.ray_runs import check_ray_address

    check_ray_address(address)
