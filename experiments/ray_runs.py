"""Scale-out on Ray (optional: ``pip install .[ray]``): one task per checkpoint of a screen, and one
KG's entity encoding split over workers into one embedding store.

Each task runs the one-process code on one GPU where the cluster has GPUs, else one CPU.  On a cluster the
workers need the toolkit, the data and the model at the same paths, and ``--runs-dir`` / the cache shared.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from deer.backends import DEFAULT_BACKEND
from deer.base.errors import OptionError
from deer.base.extras import import_extra
from deer.platform.result import RunResult
from deer.platform.run_options import ModelLoading, refuse_leftover, take
from deer.platform.validate import warn
from experiments.runs import run_probes
from kg_data.queries import QuerySet

# What ray.init takes as an address: "auto", "local", host:port, or a ray:// (Ray Client) or http(s):// URL.
RAY_ADDRESS = re.compile(r"auto|local|(?:(?:ray|https?)://)?(?:\[[0-9a-fA-F:]+\]|[\w.-]+):(\d{1,5})/?")


def check_ray_address(address) -> None:
    """Before any model loads: ``address`` (None or "": a local Ray) is one Ray can parse, else an OptionError
    naming it (Ray's own "Unable to parse port number" comes only after the driver has loaded the model)."""
    if address is None or address == "":
        return
    match = RAY_ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if match is None or (match.group(1) is not None and not 0 < int(match.group(1)) < 65536):
        raise OptionError("ray_address", address, "not a Ray address: give 'auto', 'host:port' (the head node's GCS port, "
                                                  "e.g. 10.0.0.5:6379) or 'ray://host:10001' (Ray Client)")


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
    return {"num_gpus": 1} if ray.cluster_resources().get("GPU", 0) > 0 else {"num_cpus": 1}


def _probe_task(queries: QuerySet, model_name: str, probes: Sequence[str], templates, options: dict) -> RunResult:
    return run_probes(queries, model_name, probes, None, templates, log=lambda *_: None, **options)


def run_probes_on_ray(queries: QuerySet, model_names: Sequence[str], probes: Sequence[str], templates, *,
                      address: str | None = None, num_cpus: int | None = None, **options) -> list[RunResult]:
    """``run_probes`` (its keyword ``options``) for every model, one Ray task each, in ``model_names`` order."""
    check_ray_address(address)
    options = {**options, "runs_dir": Path(options.get("runs_dir", "runs")).resolve()}
    with ray_session(address, num_cpus) as ray:
        task = ray.remote(**task_resources(ray))(_probe_task)
        return ray.get([task.remote(queries, name, list(probes), templates, options) for name in model_names])


class _EncodingWorker:
    """A Ray actor: the model loaded once, then batches of prompts encoded into shards of its own.  A worker
    that dies leaves no half shard (each is written atomically): its prompts are simply still missing."""

    def __init__(self, backend: str, model_name: str, dtype: str, device: str, special_tokens: str, token_budget: int | None,
                 store_root: str, store_key: dict, width: int):
        from deer.backends import open_backend
        from deer.platform.stores import EmbeddingStore

        runner = open_backend(backend, model_name, dtype=dtype, device=device, token_budget=token_budget, show_progress=False)
        self.loaded, self.encoder = runner.loaded, runner.encoder(special_tokens)
        key = {name: value for name, value in store_key.items() if name != "kind"}
        self.store = EmbeddingStore(Path(store_root), store_key["kind"], key, width=width)

    def ready(self) -> str:
        """The weights' fingerprint: an actor that answers is up (a restarted one, once it has loaded the model)."""
        return self.loaded.fingerprint

    def encode(self, texts: list[str], keys: np.ndarray) -> tuple[dict, int]:
        """(this worker's model identity, prompts encoded); a model other than the store key's writes nothing."""
        from deer.platform.run_spec import model_identity
        from deer.platform.stores import PendingParts

        identity = model_identity(self.loaded)
        if any(self.store.key.get(name) != value for name, value in identity.items()):
            return identity, 0
        with PendingParts(self.store) as pending:
            self.encoder.encode(texts, on_batch=lambda rows, vectors: pending.add(keys[rows], vectors))
        return identity, len(texts)


def encode_entities_on_ray(kg, model_name: str, templates, *, workers: int = 2, entities: Sequence[int] | None = None,
                           loading: ModelLoading | None = None, token_budget: int | None = None, cache_dir=None,
                           address: str | None = None, loaded=None, batch: int = 16_384, backend: str = DEFAULT_BACKEND,
                           **loose) -> Path:
    """Encode the ``entities`` (default: all) of ``kg`` missing from the model's prompt store (what
    ``deer.probe(..., cache=True)`` reads) on ``workers`` Ray actors, each writing its own shards; returns the
    store's folder.  The driver never holds the vectors; prompts a failed worker left missing are handed out again
    (twice at most).  ``loaded``: the driver's model or its opened backend when it has one (not opened again).  A prompt too long for the
    model is refused before any worker starts (cut descriptions first with ``guard_lengths`` where wanted)."""
    from deer.backends import as_backend, refuse_cache_on
    from deer.base.model_spec import with_loading
    from deer.embedding_probe import all_prompt_keys, prompt_store
    from deer.platform.inputs import store_root
    from deer.platform.length_guard import entity_prompt_check, refuse_too_long
    from deer.platform.run_spec import model_identity

    refuse_cache_on(backend, True)
    check_ray_address(address)
    loading = take(loose, ModelLoading, loading, "loading")
    refuse_leftover(loose, "encode_entities_on_ray")
    dtype, device = loading.dtype, loading.device
    model_name = with_loading(model_name, loading.model_kwargs, loading.adapter)  # a ModelSpec: its options reach the workers
    runner = as_backend(loaded if loaded is not None else model_name, backend, dtype=dtype, device=device)
    loaded, width = runner.loaded, runner.output_size  # the store's key: weights, tokenizer, dtype, the backend's own
    store = prompt_store(loaded, store_root(True, cache_dir), templates.prompt_special_tokens, width, runner.store_key)
    positions = np.arange(kg.n_entities) if entities is None else np.asarray(entities, dtype=np.int64)
    refuse_too_long([entity_prompt_check(kg, positions, templates)], runner)  # before any worker starts

    def texts_of(rows):
        return [templates.tail_prompt(kg, int(e)) for e in positions[rows]]

    keys = all_prompt_keys(texts_of, len(positions), batch)
    with store.locked():
        missing = np.asarray(store.missing(keys), dtype=np.int64)
        if not len(missing):
            return store.folder
        with ray_session(address, workers) as ray:
            actor = ray.remote(max_restarts=3, **task_resources(ray))(_EncodingWorker)  # a dead worker is started again
            pool = [actor.remote(backend, model_name, dtype, device, templates.prompt_special_tokens, token_budget,
                                 str(store.folder.parent.parent), store.key, width) for _ in range(workers)]
            failure, redone = None, 0
            for attempt in range(3):  # a failed worker's prompts are still missing: handed out again, to workers that are up
                live = pool if attempt == 0 else _live_workers(ray, pool)
                if not live:
                    break
                redone += len(missing) if attempt else 0
                failure = _encode_over(ray, live, missing, batch, texts_of, keys, model_identity(loaded), model_name) or failure
                store.refresh()
                missing = np.asarray(store.missing(keys), dtype=np.int64)
                if not len(missing):
                    break
        if len(missing):
            raise RuntimeError(f"{len(missing)} entities were not encoded by the Ray workers (three rounds); the last "
                               f"failure: {failure}; rerun to encode only those")
        if redone:  # Ray's own report of the failure reads as if the run failed: say that it did not
            warn(f"a Ray worker failed ({failure}); the {redone} entity prompts it left were encoded again by the workers "
                 f"that are up: all {len(keys)} are in the store, which is whole")
    return store.folder


def _live_workers(ray, pool, timeout: float = 120.0) -> list:
    """The actors that answer ``ready``, waiting up to ``timeout`` s for one that is restarting (a task sent
    to it meanwhile fails at once, so without this wait every round could go to a worker that is not up)."""
    deadline = time.monotonic() + timeout
    while True:
        answers = {actor.ready.remote(): actor for actor in pool}
        done, _ = ray.wait(list(answers), num_returns=len(answers), timeout=max(0.0, deadline - time.monotonic()))
        live = []
        for ref in done:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(ref)
                live.append(answers[ref])
        if live or time.monotonic() >= deadline:
            return live
        time.sleep(1.0)


def _encode_over(ray, pool, missing: np.ndarray, batch: int, texts_of, keys: np.ndarray, identity: dict,
                 model_name: str) -> str | None:
    """Hand ``missing`` out in batches, at most two in flight per actor; a failed batch stays missing, another
    model on a worker is an error.  Returns the last failure's text (None: none failed)."""
    failure = None
    batches = [missing[start:start + batch] for start in range(0, len(missing), batch)]
    in_flight: dict = {}
    while batches or in_flight:
        while batches and len(in_flight) < 2 * len(pool):
            rows = batches.pop(0)
            worker = pool[len(in_flight) % len(pool)]
            in_flight[worker.encode.remote(texts_of(rows), keys[rows])] = rows
        done, _ = ray.wait(list(in_flight), num_returns=1)
        in_flight.pop(done[0])
        try:
            seen, _ = ray.get(done[0])
        except ray.exceptions.RayError as error:
            failure = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            continue  # a dead or failed worker: its prompts stay missing and go out again
        if seen != identity:
            other = sorted(name for name, value in seen.items() if identity.get(name) != value)
            raise RuntimeError(f"a Ray worker loaded another model for {model_name} than the driver's (its {', '.join(other)} "
                               "differ); it stored nothing")
    return failure
