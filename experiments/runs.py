"""Probe runs the experiments build on: read existing run folders, or run the probes into one.

A run is a KG run's ``RunResult``, labelled (by its model), in the folder ``RunResult.save`` writes:
``ranks.parquet|csv`` (a row per query, ``{probe}_rank_raw|filtered`` columns), ``metrics.json`` and
``metadata.json`` keyed by probe, and ``run_spec.json`` (``deer.platform.run_spec``) that every probe in
the folder was run with.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import deer
from deer.backends import DEFAULT_BACKEND, as_backend, open_backend
from deer.backends.fingerprints import IN_TRAINING
from deer.base.extras import DISTRIBUTION
from deer.base.files import toolkit_version
from deer.base.model_spec import with_loading
from deer.platform.inputs import fitted_queries
from deer.platform.result import RunResult, combine_results, find_ranks_table, load_result
from deer.platform.run_options import Budget, ModelLoading, refuse_leftover, take
from deer.platform.run_spec import RunSpec, spec_folder
from deer.probes import probe_names
from experiments.report import distinct_labels
from kg_data.queries import QuerySet, queries_for

TOOLKIT = DISTRIBUTION  # its version, as every run's metadata records it (``package_versions``)


def in_registry_order(result: RunResult) -> RunResult:
    """``result`` with its probes in the registry's order (DEER first; ``deer.probes``), as the experiments list them."""
    order = {name: index for index, name in enumerate(probe_names())}
    probes = sorted(result.probes, key=lambda name: (order.get(name, len(order)), name))
    return dataclasses.replace(result, probe_metrics={p: result.probe_metrics[p] for p in probes},
                               probe_metadata={p: result.metadata_of(p) for p in probes})


def recorded_model_name(metadata: dict) -> str | None:
    """The model name (alias, hub id or folder, as given) recorded in any probe's metadata of a run."""
    for probe_metadata in metadata.values():
        model = probe_metadata.get("model") if isinstance(probe_metadata, dict) else None
        if isinstance(model, dict) and model.get("name"):
            return str(model["name"])
    return None


def run_label(metadata: dict, folder: Path) -> str:
    """The model name a run was made with (from any probe's metadata), else the folder name."""
    name = recorded_model_name(metadata)
    return Path(folder).name if name is None else model_label(name)


def label_runs_apart(runs: Sequence[RunResult], names: Sequence[str] | None = None) -> None:
    """Relabel ``runs`` in place when two share a label: by the shortest trailing part of the model path that tells
    them apart (run-a/checkpoint-10), or, for one model in several folders, of the folder path.  ``names``: the
    models as given (default: as each run's metadata records them)."""
    if len({run.label for run in runs}) == len(runs):
        return
    if names is None:
        names = [recorded_model_name(run.probe_metadata) or str(run.folder) for run in runs]
    names = [str(name) for name in names]
    folders = distinct_labels([run.folder.resolve() for run in runs])
    for run, name, label, folder in zip(runs, names, distinct_labels(names), folders, strict=True):
        run.label = f"{run.label} ({folder})" if names.count(name) > 1 else label


def check_distinct_labels(runs: Sequence[RunResult]) -> None:
    """Raise ValueError if two runs share a label: their rows, figures and JSON keys would mix."""
    labels = [run.label for run in runs]
    shared = sorted({label for label in labels if labels.count(label) > 1})
    if shared:
        folders = "; ".join(f"'{label}': {', '.join(str(r.folder) for r in runs if r.label == label)}" for label in shared)
        raise ValueError(f"runs share a label ({folders}); give each run its own label "
                         "(experiments.runs.label_runs_apart), or leave out a model given twice")


def result_header(experiment: str, runs: Sequence[RunResult], rank_type: str, settings: dict | None) -> dict:
    """The fields an experiment over runs starts its JSON with: what ran, on which runs, how."""
    return {"experiment": experiment, "rank_type": rank_type, "settings": settings or {},
            "runs": {run.label: str(run.folder) for run in runs}}


def load_run(folder: Path, label: str | None = None) -> RunResult:
    """Read a KG run folder, labelled; a ValueError naming the file where it is no readable run."""
    folder = Path(folder)
    if find_ranks_table(folder) is None:
        raise ValueError(f"{folder} holds no ranks table (ranks.parquet or ranks.csv); run `deer probe --out {folder}` first")
    run = in_registry_order(load_result(folder))
    run.label = label or run_label(run.probe_metadata, folder)
    return run


def _stored_results(folder: Path, probes: Sequence[str], spec: RunSpec,
                    options: dict[str, dict] | None = None) -> dict[str, RunResult]:
    """{probe: its result} of ``probes`` whose ranks in ``folder`` were made under ``spec`` (every field), with
    ``options`` on ``DEFAULT_BACKEND`` by this toolkit version.  Unknown options or backend (an older folder), or
    handed-in query vectors: run again.  Other options or backend: a ValueError, as a folder holds one set of ranks
    per probe."""
    from deer.probes import get_probe
    from deer.runner import HANDED_ON, recorded_options
    from deer.runner import probe_options as checked_options

    stored = RunSpec.read(folder)
    if stored is None or find_ranks_table(folder) is None or stored.differences(spec):
        return {}
    run = load_result(folder)
    recorded = {probe: run.metadata_of(probe).get("run_spec") for probe in probes if probe in run.probes}
    same_spec = [probe for probe, made_under in recorded.items()
                 if isinstance(made_under, dict) and not RunSpec.from_dict(made_under).differences(spec)]
    reusable, toolkit = [], deer.__version__
    for probe in same_spec:
        asked = checked_options(get_probe(probe), (options or {}).get(probe, {}))
        made = run.metadata_of(probe)
        made_with, backend = made.get("options"), made.get("backend")
        if not isinstance(made_with, dict) or backend is None or asked.get(HANDED_ON) is not None:
            continue  # options or backend unknown, or vectors handed in: its ranks are made again
        asked, made_with = {**recorded_options(asked), "backend": DEFAULT_BACKEND}, {**made_with, "backend": backend}
        differing = sorted(name for name in set(asked) | set(made_with) if asked.get(name) != made_with.get(name))
        if differing:
            named = "; ".join(f"{name}: the folder {made_with.get(name)!r}, asked {asked.get(name)!r}" for name in differing)
            raise ValueError(f"{folder / 'metadata.json'}: its {probe} ranks were made with other {probe} options or backend "
                             f"({named}); a folder holds one set of ranks per probe: give these options another folder "
                             "(folder=, or another runs_dir=)")
        if toolkit_version(made) == toolkit:
            reusable.append(probe)  # another version's ranks (it may score otherwise) are made again
    return {probe: run[probe] for probe in reusable}


def run_probes(queries: QuerySet, model, probes: Sequence[str], folder: Path | None, templates, *,
               loading: ModelLoading | None = None, budget: Budget | None = None, use_cache: bool = True,
               show_progress: bool = False, log=print, runs_dir: Path = Path("runs"), probe_options: dict | None = None,
               backend: str | None = None, **loose) -> RunResult:
    """Run ``probes`` for one model (a name, a ``LoadedModel`` or a backend opened on it; a name or model is opened
    on ``backend``, None: hf) into ``folder`` (None: ``deer probe``'s folder under ``runs_dir``), one shared ranks
    table.  Ranks already there for this run spec and options are read back (``_stored_results``); the others run
    together in one ``run_kg``.  ``probe_options``: {probe: its options}.  The run's ``experiment`` records each
    probe's seconds and which were reused."""
    from deer.probes import get_probe
    from deer.runner import probe_options as checked_options
    from deer.runner import queries_ranked, run_kg

    loading, budget = take(loose, ModelLoading, loading, "loading"), take(loose, Budget, budget, "budget")
    refuse_leftover(loose, "run_probes")
    # A model already open (e.g. for its tokenizer) is used as it is: opened and fingerprinted once.  A name is opened with
    # every loading option (model_kwargs and the adapter too: they were dropped here); given beside a loaded one: refused.
    model = with_loading(model, loading.model_kwargs, loading.adapter)
    runner = as_backend(model, backend, tokenizer=loading.tokenizer, dtype=loading.dtype, device=loading.device,
                        token_budget=budget.token_budget, show_progress=show_progress)
    loaded = runner.loaded
    model_name = model if isinstance(model, (str, os.PathLike)) else loaded.name
    chosen = [get_probe(probe) for probe in probes]
    guarded = fitted_queries(queries, chosen, runner, templates, budget.long_prompts)
    # the spec run_kg records: of the queries it ranks (fewer with LAMA's single_token), so a rerun finds its own folder
    ranked = queries_ranked(chosen, {p.name: checked_options(p, (probe_options or {}).get(p.name, {})) for p in chosen},
                            guarded, loaded.tokenizer)
    spec = RunSpec.build(ranked, loaded, templates)
    folder = spec_folder(folder, runs_dir, queries.kg.name, model_name, spec)  # another spec's folder: refused now
    started = time.perf_counter()
    results = _stored_results(folder, probes, spec, probe_options) if use_cache else {}  # read back: no work done now
    if len(results) < len(probes) and ranked is not guarded:  # run_kg keeps those queries only with the probe keeping them
        results = {}
    seconds = dict.fromkeys(results, time.perf_counter() - started)  # each the seconds of the one read that gave it back
    for probe in results:
        log(f"  {model_name}: {probe} ranks already in {folder}, reused")
    reused, pending = list(results), [probe for probe in probes if probe not in results]
    if pending:
        fresh = run_kg(pending, queries, runner, options={p: (probe_options or {}).get(p, {}) for p in pending},
                       templates=templates, budget=budget, cache=use_cache, out=folder, show_progress=show_progress)
        for probe in pending:
            results[probe], seconds[probe] = fresh[probe], fresh.metadata_of(probe)["seconds"]
            cache = fresh.metadata_of(probe).get("cache", {})
            from_cache = (f" ({cache['entities_from_cache']} entities, {cache['queries_from_cache']} queries from cache)"
                          if "entities_from_cache" in cache else "")
            log(f"  {model_name}: {probe}{from_cache}")
    run = in_registry_order(combine_results([results[probe] for probe in probes]))
    run.label, run.folder, run.experiment = model_label(model_name), folder, {"probe_seconds": seconds, "reused": reused}
    return run


def model_label(model_name: str) -> str:
    """A run's label: a model folder's last part (of its absolute path: '.' has none), else the name as given."""
    return Path(model_name).resolve().name if Path(model_name).exists() else str(model_name)


def same_weights(runs: Sequence[RunResult]) -> dict[str, str]:
    """{label: label of the first run with the same run spec} for every run repeating an earlier one (a model
    probed while training is named, not hashed: never the same as another)."""
    first: dict[RunSpec, str] = {}
    repeats = {}
    for run in runs:
        spec = run.probe_metadata.get("deer", {}).get("run_spec")  # the run spec its DEER ranks were made under
        if spec and not str(spec.get("model_fingerprint")).startswith(IN_TRAINING):
            identity = RunSpec.from_dict(spec)
            if identity in first:
                repeats[run.label] = first[identity]
            first.setdefault(identity, run.label)
    return repeats


def probe_series(queries: QuerySet, names: Sequence[str], probes: Sequence[str], templates, *, dtype: str | None = None,
                 device: str | None = None, log=print, **options) -> list[RunResult]:
    """``run_probes`` for each model, each opened once; one whose run spec repeats an earlier one's is not probed
    again but gets that run under its own name, marked ``experiment.same_weights_as``."""
    given = {key: value for key, value in (("dtype", dtype), ("device", device)) if value is not None}  # None: not written
    loading = take(given, ModelLoading, options.pop("loading", None), "loading")
    runs: list[RunResult] = []
    done: dict[RunSpec, RunResult] = {}
    for name in names:
        runner = open_backend(options.get("backend") or DEFAULT_BACKEND, name, dtype=loading.dtype, device=loading.device)
        loaded = runner.loaded
        identity = RunSpec.build(queries, loaded, templates)
        if identity in done:
            earlier = done[identity]
            log(f"  {name}: the same weights as {earlier.label} (fingerprint {loaded.fingerprint}); its ranks are reused, "
                "not probed again")
            experiment = {**json.loads(json.dumps(earlier.experiment)), "same_weights_as": earlier.label, "probe_seconds": {}}
            runs.append(dataclasses.replace(earlier, label=model_label(name), experiment=experiment))
            continue
        done[identity] = run_probes(queries, runner, probes, None, templates, loading=loading, log=log, **options)
        runs.append(done[identity])
    return runs


def restrict_queries(queries: QuerySet, rows: Sequence[int], n_candidates: int | None, seed: int) -> QuerySet:
    """The queries at ``rows`` ranked among ``n_candidates`` entities: their gold tails plus others sampled
    uniformly with ``seed`` (None: the candidates of ``queries``); the filter is rebuilt for the new set."""
    triples = queries.triples[np.asarray(rows, dtype=np.int64)]
    candidates = queries.candidates
    if n_candidates is not None and n_candidates < len(candidates):
        gold_entities = np.unique(triples[:, 2])
        others = np.setdiff1d(candidates, gold_entities)
        extra = max(0, n_candidates - len(gold_entities))
        sampled = np.random.default_rng(seed).choice(others, size=min(extra, len(others)), replace=False)
        candidates = np.unique(np.concatenate([gold_entities, sampled]))
    return queries_for(queries.kg, queries.split, triples, candidates, seed)
