"""Scale-out on Ray (optional: ``pip install .[ray]``): one task per checkpoint of a screen, and one
KG's entity encoding split over workers into one embedding store.

Each task runs the one-process code (``experiments.runs.run_probes``, or the encoder on a slice of the
entities) on one GPU where the cluster has GPUs, else one CPU.  On a cluster the workers need the
toolkit, the data and the model at the same paths, and ``--runs-dir`` / the cache on a shared file system.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from deer.platform.extras import import_extra
from experiments.runs import ProbeRun, run_probes
from kg_data.queries import QuerySet


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator:
    """Ray, connected: to ``address`` (a running cluster, or "auto"), else a local one started here
    (with ``num_cpus`` workers' worth of CPUs) and shut down after.  An already connected driver is used as it is."""
    ray = import_extra("ray", "ray", "Scale-out with --ray")
    started_here = not ray.is_initialized()
    if started_here:
        env = {key: os.environ[key] for key in ("DEER_CACHE_DIR", "HF_HUB_OFFLINE", "HF_HOME", "DEER_OFFLINE") if key in os.environ}
        options = {"address": address} if address else {"num_cpus": num_cpus}
        ray.init(**options, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def task_resources(ray) -> dict:
    """One GPU per task where the cluster has GPUs, else one CPU."""
    return {"num_gpus": 1} if ray.cluster_resources().get("GPU", 0) > 0 else {"num_cpus": 1}


def _probe_task(queries: QuerySet, model_name: str, probes: Sequence[str], templates, options: dict) -> ProbeRun:
    return run_probes(queries, model_name, probes, None, templates, log=lambda *_: None, **options)


def run_probes_on_ray(queries: QuerySet, model_names: Sequence[str], probes: Sequence[str], templates, *,
                      address: str | None = None, num_cpus: int | None = None, **options) -> list[ProbeRun]:
    """``run_probes`` for every model, one Ray task each (``options``: dtype, device,
    token_budget, use_cache, runs_dir, probe_options); runs come back in ``model_names`` order."""
    options = {**options, "runs_dir": Path(options.get("runs_dir", "runs")).resolve()}
    with ray_session(address, num_cpus) as ray:
        task = ray.remote(**task_resources(ray))(_probe_task)
        return ray.get([task.remote(queries, name, list(probes), templates, options) for name in model_names])


def _encode_task(model_name: str, dtype: str, device: str, texts: Sequence[str], special_tokens: str,
                 token_budget: int | None) -> tuple[str, np.ndarray]:
    from deer.backends.encoder import PromptEOLEncoder
    from deer.platform.models import open_model

    loaded = open_model(model_name, dtype=dtype, device=device)
    encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=False,
                               special_tokens=special_tokens)
    return loaded.fingerprint, encoder.encode(texts).embeddings


def encode_entities_on_ray(kg, model_name: str, templates, *, workers: int = 2, entities: Sequence[int] | None = None,
                           dtype: str = "auto", device: str = "auto", token_budget: int | None = None, cache_dir=None,
                           address: str | None = None, loaded=None) -> Path:
    """Encode the ``entities`` (default: all) of ``kg`` that the model's prompt store (what
    ``deer.probe(..., cache=True)`` reads) lacks, split over ``workers`` Ray tasks; returns the store's folder.
    ``loaded``: the driver's ``LoadedModel`` of ``model_name`` when it has one (not opened again)."""
    from deer.backends.encoder import output_size
    from deer.embedding_probe import prompt_id, prompt_store
    from deer.platform.inputs import store_root
    from deer.platform.models import open_model

    if loaded is None:  # the store's key: weights, tokenizer, dtype
        loaded = open_model(model_name, dtype=dtype, device=device)
    store = prompt_store(loaded, store_root(True, cache_dir), templates.prompt_special_tokens, output_size(loaded.model))
    positions = list(range(kg.n_entities)) if entities is None else list(entities)
    texts = [templates.tail_prompt(kg, e) for e in positions]
    ids = [prompt_id(text) for text in texts]
    with store.locked():
        missing = store.missing(ids)
        chunks = [chunk for chunk in np.array_split(np.asarray(missing, dtype=np.int64), workers) if len(chunk)]
        if chunks:
            with ray_session(address, workers) as ray:
                task = ray.remote(**task_resources(ray))(_encode_task)
                futures = [task.remote(model_name, dtype, device, [texts[i] for i in chunk],
                                       templates.prompt_special_tokens, token_budget) for chunk in chunks]
                for chunk, (fingerprint, vectors) in zip(chunks, ray.get(futures), strict=True):
                    if fingerprint != loaded.fingerprint:
                        raise RuntimeError(f"a Ray worker loaded other weights for {model_name} ({fingerprint} != {loaded.fingerprint})")
                    store.add([ids[i] for i in chunk], vectors)
    return store.folder
