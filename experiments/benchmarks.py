"""Probing on BEAR's and LAMA's own benchmarks, one model (``probe_benchmark``) or several (``compare_models``):
what `deer cloze` calls."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bear_ref.cloze_scoring import lama_vocabulary
from deer.backends import as_backend, backend_class, backend_name_for, refuse_cache_on
from deer.base.errors import check_count, check_names, check_path, wrong_type
from deer.base.files import write_json, write_text
from deer.base.model_spec import with_loading
from deer.platform.inputs import check_inputs, store_root
from deer.platform.metrics import cloze_blocks
from deer.platform.result import QUERIES_TABLE, refuse_other_run
from deer.platform.run_options import Budget, ModelLoading, refuse_leftover, settle, take
from deer.platform.tables import markdown_table
from deer.runner import BENCHMARK_PROBES, benchmark_probes, check_run_arguments, run_cloze
from experiments.cloze_bear import bear_scoring, check_bear_run, compare_with_bear, stored_bear_table
from experiments.cloze_report import mode_agreement, probe_agreement, summary_markdown
from experiments.report import distinct_labels
from experiments.stats import ordering_agreement
from kg_data.bear import METADATA_FILE, BearDataset, load_bear_dataset
from kg_data.cloze import CANDIDATE_KINDS, MODES, bear_cloze_task, check_lama_queries, check_modes, lama_cloze_task
from kg_data.errors import KGFormatError
from kg_data.lama import COMMON_VOCAB_FILE, RELATIONS_FILE, load_lama
from kg_data.load import dataset_kind
from kg_data.locks import held_lock
from kg_data.task import Task


def benchmark_kind(dataset) -> str:
    """'lama' or 'bear' for a name or folder (``kg_data.load.dataset_kind``); a KG is an error."""
    kind = dataset_kind(dataset)
    if kind == "kg":
        raise ValueError(f"{dataset}: not 'lama', 'bear', 'bear-big', nor a folder holding {RELATIONS_FILE} (LAMA) "
                         f"or {METADATA_FILE} (BEAR format)")
    return kind


@dataclasses.dataclass(frozen=True)
class BenchmarkSelection:
    """Which facts of a benchmark: ``relations`` and (LAMA) ``sources``, at most ``max_facts`` per relation
    sampled with ``seed`` (also the bootstrap's), queried in ``modes`` over ``candidate_kinds``."""

    data_dir: Any = None
    relations: Sequence[str] | None = None
    sources: Sequence[str] | None = None
    max_facts: int | None = None
    seed: int = 0
    modes: Sequence[str] = MODES
    candidate_kinds: Sequence[str] = CANDIDATE_KINDS

    def __post_init__(self):  # each field's type, named (as QuerySelection's)
        check_path("data_dir", self.data_dir)
        for name in ("relations", "sources", "modes", "candidate_kinds"):
            check_names(name, getattr(self, name), allow_none=name in ("relations", "sources"))
        settle(self, max_facts=check_count("max_facts", self.max_facts, 1, allow_none=True), seed=check_count("seed", self.seed, 0))


def _refuse_lama_only_selection(dataset, selection: BenchmarkSelection) -> None:
    """ValueError naming what a BEAR-format data set (templates and each relation's answers only) cannot honour."""
    if "relation" not in selection.candidate_kinds:
        raise ValueError(f"{dataset}: candidate kinds {list(selection.candidate_kinds)}: a BEAR-format data set ranks each "
                         "relation's answers only (kind 'relation'); common-vocab is LAMA's")
    if selection.sources:
        raise ValueError(f"{dataset}: sources {list(selection.sources)} are LAMA's (TREx, Google_RE, Squad); a BEAR-format "
                         "data set has none: drop sources, or probe LAMA")
    if "template" not in selection.modes:
        raise ValueError(f"{dataset}: modes {list(selection.modes)}: a BEAR-format data set has templates only (mode "
                         "'template'); template-free (evidence sentences) is LAMA's")


def load_benchmark(dataset, selection: BenchmarkSelection):
    """The benchmark's data, read and checked with no model (a bad file is an error naming it)."""
    check_modes(selection.modes, selection.candidate_kinds)
    if benchmark_kind(dataset) == "bear":
        _refuse_lama_only_selection(dataset, selection)
        return load_bear_dataset(dataset, selection.data_dir, relations=selection.relations, max_instances=selection.max_facts,
                                 seed=selection.seed)
    data = load_lama(dataset, selection.data_dir, sources=selection.sources, relations=selection.relations,
                     max_facts=selection.max_facts, seed=selection.seed)
    if "common-vocab" in selection.candidate_kinds and not data.common_vocab:
        raise KGFormatError(Path(data.path) / COMMON_VOCAB_FILE, None,
                            "missing or empty: the common-vocabulary candidates need it (or rank the relation's objects only)")
    check_lama_queries(data, selection.modes)
    return data


@contextlib.contextmanager
def nothing_left_on_failure(out):
    """On an error (Ctrl-C too), remove what this run created in ``out`` except finished probes (``cloze/parts/KEY/``,
    from which it resumes).  A lock beside ``out`` makes a second run wait, so only this run's files are removed."""
    if out is None:
        yield
        return
    out = Path(out)
    with held_lock(out.parent / f".{out.name}.lock", f"{out} is being written by another run; waiting for it"):
        existed = out.exists()
        before = set(out.rglob("*")) if existed else set()
        try:
            yield
        except BaseException:
            _remove_created(out, before, existed)
            raise


def _remove_created(out: Path, before: set, existed: bool) -> None:
    created = set(out.rglob("*")) - before if out.exists() else set()
    for path in sorted(created, key=lambda p: len(p.parts), reverse=True):  # a folder after what it holds
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        elif path.is_file() and not (path.parent.parent.name == "parts" and any(path.parent.glob("*.parquet"))):
            path.unlink()
    if not existed and out.exists() and not any(out.iterdir()):
        out.rmdir()


def build_task(data, backend, modes: Sequence[str] = MODES, candidate_kinds: Sequence[str] = CANDIDATE_KINDS) -> Task:
    """The cloze task of loaded data (LAMA's vocabulary: the backend's single-token words, ``lama_vocabulary``)."""
    if isinstance(data, BearDataset):
        return bear_cloze_task(data)
    masked = backend.is_masked_lm
    vocabulary = lama_vocabulary(backend.tokenizer, data.common_vocab, masked)
    task = lama_cloze_task(data, vocabulary, modes, candidate_kinds, causal=not masked)
    task.info["single_token_rule"] = ("'word' fills the mask of '[X] is [Y] .' with one token" if masked
                                      else "'word' is one token after 'is' in the statement '[X] is [Y] .'")
    return task


def probe_benchmark(dataset="lama", model="smollm2-135m", *, selection: BenchmarkSelection | None = None,
                    loading: ModelLoading | None = None, budget: Budget | None = None, probes: Sequence[str] = BENCHMARK_PROBES,
                    bear_run=None, bootstrap: int = 1000, out=None, backend: str | None = None, cache: bool = False,
                    show_progress: bool = True, **options) -> dict:
    """Run ``probes`` on a benchmark; returns the report {"result" (the cloze run's ``RunResult``), "agreement",
    "mode_agreement", and the result's "table", "metrics" and "metadata" by probe} (and "bear_dataset" for DEER
    on a BEAR-format data set).  ``model``: a name, a loaded model or an opened backend (``open_backend``).
    ``selection``, ``loading`` and ``budget`` are each an object or its fields as loose keywords (``max_facts=``,
    ``relations=``, ``dtype=``, ``token_budget=``, ...).  ``backend``: 'hf' (None: hf, or the opened backend's
    own), 'plain' (one whole forward pass per text, a cross-check) or another registered one.  ``cache``: keep DEER's candidate vectors in the
    model's prompt store under ``cache_dir=`` (default $DEER_CACHE_DIR or ~/.cache/deer) for every later run."""
    # Every input is checked before the model is loaded: the options and --out, the data, a stored BEAR run's digests.
    if not isinstance(dataset, (str, os.PathLike)):
        raise wrong_type("dataset", dataset, "'lama', 'bear', 'bear-big' or a data set folder (str or Path)")
    cache_dir = options.pop("cache_dir", None)
    selection = take(options, BenchmarkSelection, selection, "selection")
    loading, budget = take(options, ModelLoading, loading, "loading"), take(options, Budget, budget, "budget")
    refuse_leftover(options, "probe_benchmark")
    model = with_loading(model, loading.model_kwargs, loading.adapter)
    backend = backend_name_for(model, backend)
    backend_class(backend)
    check_count("bootstrap", bootstrap, 0)  # 0: no bootstrap intervals
    check_run_arguments(cache=cache, show_progress=show_progress, out=out, cache_dir=cache_dir, bear_run=bear_run)
    refuse_cache_on(backend, cache)
    check_inputs(model, out=out, seed=selection.seed, token_budget=budget.token_budget, dtype=loading.dtype,
                 device=loading.device, max_instances=selection.max_facts, long_prompts=budget.long_prompts, benchmark=True)
    for folder in () if out is None else (Path(out), Path(out) / "cloze"):  # its report, and the run's own folder
        refuse_other_run(folder, QUERIES_TABLE, "a cloze benchmark run")
    probes = [probe.name for probe in benchmark_probes(probes)]
    bear_data_set = benchmark_kind(dataset) == "bear" and "deer" in probes
    if bear_data_set and out is None:
        raise ValueError("DEER on a BEAR data set writes its comparison with BEAR: give out=")
    if bear_run is not None and not bear_data_set:
        raise ValueError("bear_run (--bear-run) is read only for DEER on a BEAR-format data set (--probes with deer)")
    data = load_benchmark(dataset, selection)
    if bear_run is not None:
        check_bear_run(bear_run, data)
    runner = as_backend(model, backend, tokenizer=loading.tokenizer, dtype=loading.dtype, device=loading.device,
                        token_budget=budget.token_budget, show_progress=show_progress)
    loaded = runner.loaded
    with nothing_left_on_failure(out), runner.evaluation_mode():
        bear_table = stored_bear_table(bear_run, data, loaded, bear_scoring(runner)) if bear_run is not None else None
        task = build_task(data, runner, selection.modes, selection.candidate_kinds)
        report = {}
        run_probes = [p for p in probes if not (bear_run and p == "bear")] if bear_data_set else list(probes)
        if bear_data_set and not bear_run and "bear" not in run_probes:
            run_probes.append("bear")
        result = run_cloze(task, runner, run_probes, out=None if out is None else Path(out) / "cloze",
                           show_progress=show_progress, store_root=store_root(cache, cache_dir))
        if bear_data_set:
            report["bear_dataset"] = compare_with_bear(result, data, loaded, Path(out) / "bear_dataset", bear_run, bootstrap, selection.seed,
                                                       bear_table)
        metrics = result.probe_metrics
        agreement = probe_agreement(result.table, bootstrap, selection.seed)
        modes_rows = mode_agreement(result.table, bootstrap, selection.seed)
        report.update({"result": result, "table": result.table, "metrics": metrics, "agreement": agreement,
                       "mode_agreement": modes_rows, "metadata": result.probe_metadata})
        if out is not None:
            out = Path(out)
            if "bear_dataset" not in report:  # an earlier run's DEER-vs-BEAR comparison there is not this run's
                shutil.rmtree(out / "bear_dataset", ignore_errors=True)
            write_json(out / "metrics.json", metrics)
            write_json(out / "agreement.json", {"probes": agreement, "template_vs_template_free": modes_rows})
            write_text(out / "summary.md", summary_markdown(metrics, agreement, modes_rows)
                       + ("\nBEAR data-set comparison: bear_dataset/summary.md\n" if "bear_dataset" in report else ""))
    return report


def headline(metrics: dict, kind: str, mode: str, probe: str) -> float | None:
    return metrics.get(probe, {}).get(kind, {}).get(mode, {}).get("overall", {}).get("p@1")


def compare_models(dataset, models: Sequence[str], out, probes: Sequence[str] = BENCHMARK_PROBES, **options) -> dict:
    """``probe_benchmark`` per model, then each probe's model ordering and the agreement between
    orderings (per candidate kind and mode); writes ``out/orderings.json`` and ``orderings.md``."""
    out = Path(out)
    loading = options.get("loading") or ModelLoading(model_kwargs=options.get("model_kwargs"), adapter=options.get("adapter"))
    for name in models:  # every model's folder, adapter and config, before the first is probed
        check_inputs(with_loading(name, loading.model_kwargs, loading.adapter))
    # One folder per model, named so that two checkpoints called alike (a/checkpoint-10, b/checkpoint-10) never share one.
    reports = {name: probe_benchmark(dataset, name, probes=probes, out=out / label, **options)
               for name, label in zip(models, distinct_labels(models), strict=True)}
    names = list(reports)
    rows, headline_rows = [], []
    for kind, mode in sorted({(k, m) for r in reports.values() for k, m, _, _ in cloze_blocks(r["metrics"])}):
        scores = {p: [headline(reports[n]["metrics"], kind, mode, p) for n in names] for p in probes}
        for p, values in scores.items():
            headline_rows.append({"candidates": kind, "mode": mode, "probe": p, **dict(zip(names, values, strict=True))})
        for a, b in itertools.combinations(probes, 2):
            if all(v is not None for v in scores[a] + scores[b]) and len(names) >= 2:
                rows.append({"kind": kind, "mode": mode, "pair": f"{a} vs {b}", **ordering_agreement(scores[a], scores[b], names)})
    lines = markdown_table(headline_rows, dict.fromkeys(names, ".3f")).splitlines() if headline_rows else []
    lines += ["", f"Orderings of {len(names)} models (P@1; Spearman/Kendall between probes' orderings; with so few models "
                  "the p-values show how little an ordering agreement can establish):", ""]
    orderings = pd.DataFrame([[r["kind"], r["mode"], r["pair"], r["spearman_rho"], r["spearman_p"], r["kendall_tau"], r["kendall_p"],
                               " > ".join(r["order_a"]), " > ".join(r["order_b"])] for r in rows],
                             columns=["candidates", "mode", "pair", "Spearman", "p", "Kendall", "p ", "order (first probe)", "order (second)"])
    lines += markdown_table(orderings, dict.fromkeys(["Spearman", "p", "Kendall", "p "], ".2f")).splitlines()
    write_json(out / "orderings.json", {"models": names, "orderings": rows})
    write_text(out / "orderings.md", "\n".join(lines) + "\n")
    return {"reports": reports, "orderings": rows}
