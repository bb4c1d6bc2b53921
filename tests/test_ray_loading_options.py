"""``encode_entities_on_ray``'s model loading options reach the driver and every worker, checked without Ray: the
actors run in this process (a stand-in for the few calls of Ray that the encoding makes)."""

from __future__ import annotations

import contextlib
import json
import types

import pytest

from deer.base.model_spec import ModelSpec, loading_suffix
from deer.platform.run_options import ModelLoading
from deer.platform.templates import PromptTemplates
from kg_data.load import load_kg


class _RayError(Exception):
    """Ray's own errors (none is raised here: any error of a worker reaches the test)."""


class _Call:
    def __init__(self, function, *args):
        self.function, self.args = function, args


def _in_process_ray():
    """Ray's calls as ``encode_entities_on_ray`` makes them, each run here at once."""
    def method(function):
        return types.SimpleNamespace(remote=lambda *args: _Call(function, *args))

    def actor_class(cls):
        def start(*args):
            instance = cls(*args)
            return types.SimpleNamespace(ready=method(instance.ready), encode=method(instance.encode))
        return types.SimpleNamespace(remote=start)

    return types.SimpleNamespace(remote=lambda **resources: actor_class, cluster_resources=dict,
                                 get=lambda call: call.function(*call.args),
                                 wait=lambda calls, num_returns=1, timeout=None: (calls[:num_returns], calls[num_returns:]),
                                 exceptions=types.SimpleNamespace(RayError=_RayError))


@pytest.mark.parametrize("given", ["loading", "model_spec"])
def test_ray_encoding_loads_the_model_with_its_loading_options_on_the_driver_and_the_workers(tiny_kg_dir, tiny_clm_dir,
                                                                                             tmp_path, monkeypatch, given):
    """Audit s11-C: ``loading=ModelLoading(model_kwargs=...)`` was dropped (the store written for the model loaded without
    them, which a run with them never reads), and a ``ModelSpec`` name reached the workers as a plain name (its options
    dropped there: 'a Ray worker loaded other weights')."""
    from experiments import ray_runs

    monkeypatch.setattr(ray_runs, "ray_session", lambda *args, **kwargs: contextlib.nullcontext(_in_process_ray()))
    options = {"attn_implementation": "eager"}
    name = str(tiny_clm_dir)
    call = ({"model_name": name, "loading": ModelLoading(model_kwargs=options)} if given == "loading"
            else {"model_name": ModelSpec(name, options)})
    folder = ray_runs.encode_entities_on_ray(load_kg(tiny_kg_dir), templates=PromptTemplates(k_shot=1), workers=1,
                                             cache_dir=tmp_path / "cache", **call)
    assert json.loads((folder / "key.json").read_text())["model_fingerprint"].endswith(loading_suffix(options))


@pytest.mark.parametrize("differs", ["tokenizer", "weights"])
def test_a_worker_model_other_than_the_drivers_stores_nothing_and_is_refused(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch,
                                                                              differs):
    """The driver's ``loaded`` keys the store; the workers load ``model_name`` from disk.  Only the weights' fingerprint was
    compared, and after the worker had written its shards: a driver tokenizer other than the disk's (lower-casing) had
    the workers' vectors stored under its key and read by DEER as its own, and other weights left theirs in the store."""
    import torch
    from tokenizers import normalizers

    from deer.backends.models import open_model
    from experiments import ray_runs
    from tests.store_faults import stored_parts

    monkeypatch.setattr(ray_runs, "ray_session", lambda *args, **kwargs: contextlib.nullcontext(_in_process_ray()))
    loaded = open_model(str(tiny_clm_dir))
    if differs == "tokenizer":
        loaded.tokenizer.backend_tokenizer.normalizer = normalizers.Lowercase()
    else:
        with torch.no_grad():
            next(loaded.model.parameters()).add_(1.0)
    loaded = loaded.current()
    with pytest.raises(RuntimeError, match=f"another model .*{'tokenizer' if differs == 'tokenizer' else 'model'}_fingerprint"):
        ray_runs.encode_entities_on_ray(load_kg(tiny_kg_dir), str(tiny_clm_dir), PromptTemplates(k_shot=1), workers=1,
                                        cache_dir=tmp_path / "cache", loaded=loaded)
    assert stored_parts(tmp_path / "cache") == []
