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
    from tests.test_checkpoint_screen import _save_checkpoint

    for step in (1, 2, 3):
        _save_checkpoint(tiny_clm_dir, tmp_path / "series", step)
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
            np.testing.assert_array_equal(one.ranks("deer", rank_type), other.ranks("deer", rank_type))
        assert other.folder.parent == (tmp_path / "ray").resolve()
    assert len({tuple(run.ranks("deer", "raw")) for run in sequential}) > 1  # the checkpoints differ


def test_entities_split_over_two_workers_make_the_one_process_store(tiny_clm_dir, tiny_kg_dir, tmp_path):
    import deer
    from deer.embedding_probe import prompt_id, prompt_store
    from deer.platform.models import open_model
    from experiments.ray_runs import encode_entities_on_ray

    kg = load_kg(tiny_kg_dir)
    templates = PromptTemplates()
    folder = encode_entities_on_ray(kg, str(tiny_clm_dir), templates, workers=2, cache_dir=tmp_path / "ray-cache", address=None)
    deer.probe(build_queries(kg, "test"), str(tiny_clm_dir), templates=templates, cache=True, cache_dir=tmp_path / "one-cache",
               show_progress=False)
    loaded = open_model(str(tiny_clm_dir))
    split = prompt_store(loaded, tmp_path / "ray-cache", templates.prompt_special_tokens)
    single = prompt_store(loaded, tmp_path / "one-cache", templates.prompt_special_tokens)
    assert split.folder == folder and len(list(folder.glob("part-*.npz"))) == 2  # one part per worker
    ids = [prompt_id(templates.tail_prompt(kg, e)) for e in range(kg.n_entities)]
    assert split.missing(ids) == [] and single.missing(ids) == []
    np.testing.assert_allclose(split.get(ids), single.get(ids), rtol=1e-6, atol=1e-6)
    again = encode_entities_on_ray(kg, str(tiny_clm_dir), templates, workers=2, cache_dir=tmp_path / "ray-cache")
    assert again == folder and len(list(folder.glob("part-*.npz"))) == 2  # nothing missing: no task, no new part
