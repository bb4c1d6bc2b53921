"""Running a cloze benchmark (LAMA, the BEAR data set): every input checked before the model loads, the data read,
the backend opened, the cloze task built and run by ``deer.runner.run_cloze``.  For DEER on a BEAR-format data set,
BEAR's ranks come from the same run or from a finished `deer bear-dataset` folder of the same model and data (checked
before anything is scored), and both are read as the BEAR data-set score reads them.  The run's reports (agreement
tables, summaries) are ``experiments.benchmarks``'."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

import deer
from bear_ref.cloze_scoring import lama_vocabulary
from bear_ref.dataset import INSTANCE_COLUMNS, PROBE, STATEMENT_RULE, bear_format, bear_metrics, find_instances_table
from deer.backends import as_backend, backend_class, backend_name_for, refuse_cache_on
from deer.backends.models import LoadedModel
from deer.base.errors import check_count, check_names, check_path, wrong_type
from deer.base.files import as_written, toolkit_version
from deer.base.model_spec import with_loading
from deer.platform.inputs import check_inputs, store_root
from deer.platform.read_back import StoredFileError, read_json_object, read_stored_table
from deer.platform.result import QUERIES_TABLE, RunResult, refuse_other_run
from deer.platform.run_options import Budget, ModelLoading, refuse_leftover, settle, take
from deer.runner import BENCHMARK_PROBES, benchmark_probes, check_run_arguments, run_cloze
from kg_data.bear import BearDataset
from kg_data.cloze import CANDIDATE_KINDS, MODES, bear_cloze_task, lama_cloze_task
from kg_data.lama import LamaDataset
from kg_data.load import load_benchmark as read_benchmark
from kg_data.locks import held_lock
from kg_data.task import Task


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


@dataclasses.dataclass(frozen=True)
class BearScores:
    """DEER's and BEAR's ranks of a cloze run on a BEAR-format data set as the BEAR data-set score reads them:
    ``tables`` by probe (``bear_format``: a row per instance and template), their ``metrics`` (``bear_metrics``),
    DEER's ``per_template`` overall block, and the ``bear_run`` folder BEAR's came from (None: the same run)."""

    tables: dict[str, pd.DataFrame]
    metrics: dict[str, dict]
    per_template: dict[int, dict]
    bear_run: str | os.PathLike | None = None


@dataclasses.dataclass(frozen=True)
class BenchmarkRun:
    """A finished cloze benchmark run: its ``result`` (``run_cloze``'s), the ``data`` and ``selection`` it ran on, the
    ``loaded`` model and, for DEER on a BEAR-format data set, ``bear`` (DEER's and BEAR's BEAR scores; else None)."""

    result: RunResult
    data: LamaDataset | BearDataset
    selection: BenchmarkSelection
    loaded: LoadedModel
    bear: BearScores | None = None


@contextlib.contextmanager
def benchmark_run(dataset="lama", model="smollm2-135m", *, selection: BenchmarkSelection | None = None,
                  loading: ModelLoading | None = None, budget: Budget | None = None, probes: Sequence[str] = BENCHMARK_PROBES,
                  bear_run=None, out=None, backend: str | None = None, cache: bool = False, show_progress: bool = True,
                  **options) -> Iterator[BenchmarkRun]:
    """Run ``probes`` on a benchmark (arguments as ``experiments.benchmarks.probe_benchmark``'s) into ``out/cloze``
    and hand the ``BenchmarkRun`` to the block, which writes its reports into ``out``: while the block runs the
    folder stays locked, and on any error everything the run and the block created there goes but finished probes
    (``nothing_left_on_failure``).  Every input is checked before the model loads: the options and ``out``, the
    data, a stored BEAR run's digests."""
    if not isinstance(dataset, (str, os.PathLike)):
        raise wrong_type("dataset", dataset, "'lama', 'bear', 'bear-big' or a data set folder (str or Path)")
    cache_dir = options.pop("cache_dir", None)
    selection = take(options, BenchmarkSelection, selection, "selection")
    loading, budget = take(options, ModelLoading, loading, "loading"), take(options, Budget, budget, "budget")
    refuse_leftover(options, "probe_benchmark")
    model = with_loading(model, loading.model_kwargs, loading.adapter)
    backend = backend_name_for(model, backend)
    backend_class(backend)
    check_run_arguments(cache=cache, show_progress=show_progress, out=out, cache_dir=cache_dir, bear_run=bear_run)
    refuse_cache_on(backend, cache)
    check_inputs(model, out=out, seed=selection.seed, token_budget=budget.token_budget, dtype=loading.dtype,
                 device=loading.device, max_instances=selection.max_facts, long_prompts=budget.long_prompts, benchmark=True)
    for folder in () if out is None else (Path(out), Path(out) / "cloze"):  # its report, and the run's own folder
        refuse_other_run(folder, QUERIES_TABLE, "a cloze benchmark run")
    probes = [probe.name for probe in benchmark_probes(probes)]
    data = load_benchmark(dataset, selection)
    bear_data_set = isinstance(data, BearDataset) and "deer" in probes
    if bear_data_set and out is None:
        raise ValueError("DEER on a BEAR data set writes its comparison with BEAR: give out=")
    if bear_run is not None and not bear_data_set:
        raise ValueError("bear_run (--bear-run) is read only for DEER on a BEAR-format data set (--probes with deer)")
    if bear_run is not None:
        check_bear_run(bear_run, data)
    runner = as_backend(model, backend, tokenizer=loading.tokenizer, dtype=loading.dtype, device=loading.device,
                        token_budget=budget.token_budget, show_progress=show_progress)
    with nothing_left_on_failure(out), runner.evaluation_mode():
        bear_table = stored_bear_table(bear_run, data, runner.loaded, bear_scoring(runner)) if bear_run is not None else None
        task = build_task(data, runner, selection.modes, selection.candidate_kinds)
        result = run_cloze(task, runner, _scored_probes(probes, bear_data_set, bear_run),
                           out=None if out is None else Path(out) / "cloze", show_progress=show_progress,
                           store_root=store_root(cache, cache_dir))
        bear = bear_scores(result, data, bear_run, bear_table) if bear_data_set else None
        yield BenchmarkRun(result, data, selection, runner.loaded, bear)


def load_benchmark(dataset, selection: BenchmarkSelection) -> LamaDataset | BearDataset:
    """The benchmark's data, read and checked with no model (``kg_data.load.load_benchmark`` of ``selection``)."""
    fields = {field.name: getattr(selection, field.name) for field in dataclasses.fields(selection)}
    return read_benchmark(dataset, fields.pop("data_dir"), **fields)


def _scored_probes(probes: Sequence[str], bear_data_set: bool, bear_run) -> list[str]:
    """DEER on a BEAR-format data set (``bear_data_set``) needs BEAR's ranks: scored now unless ``bear_run`` has them."""
    if not bear_data_set:
        return list(probes)
    return [p for p in probes if p != "bear"] if bear_run else [*probes, *(["bear"] if "bear" not in probes else [])]


def bear_scores(result: RunResult, data: BearDataset, bear_run=None, bear_table: pd.DataFrame | None = None) -> BearScores:
    """DEER's ranks in ``result`` and BEAR's (the same run's, or ``bear_run``'s read as ``bear_table``) as BEAR scores."""
    deer_table = bear_format(result.table, data, "deer")
    if bear_table is None:
        if "bear_rank" not in result.table:
            raise ValueError("no BEAR ranks: run the bear probe too, or name a finished `deer bear-dataset` folder (bear_run)")
        bear_table = bear_format(result.table, data, "bear")
    per_template = {int(t): bear_metrics(part, data)["overall"] for t, part in deer_table.groupby("template")}
    return BearScores({"deer": deer_table, "bear": bear_table},
                      {"deer": bear_metrics(deer_table, data), "bear": bear_metrics(bear_table, data)}, per_template, bear_run)


def build_task(data, backend, modes: Sequence[str] = MODES, candidate_kinds: Sequence[str] = CANDIDATE_KINDS) -> Task:
    """The cloze task of loaded data (LAMA's vocabulary: the backend's single-token words, ``lama_vocabulary``)."""
    if isinstance(data, LamaDataset):
        masked = backend.is_masked_lm
        vocabulary = lama_vocabulary(backend.tokenizer, data.common_vocab, masked)
        task = lama_cloze_task(data, vocabulary, modes, candidate_kinds, causal=not masked)
        task.info["single_token_rule"] = ("'word' fills the mask of '[X] is [Y] .' with one token" if masked
                                          else "'word' is one token after 'is' in the statement '[X] is [Y] .'")
        return task
    return bear_cloze_task(data)


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


def check_bear_run(folder: str | Path, dataset: BearDataset) -> dict:
    """The metadata of a finished ``deer bear-dataset`` run in ``folder``; ValueError unless every relation's
    content digest (templates, answer space, instances, gold) matches ``dataset``.  Needs no model."""
    folder = Path(folder)
    path = folder / "metadata.json"
    try:
        metadata = read_json_object(path).get("bear")
    except StoredFileError:
        metadata = None
    if not isinstance(metadata, dict) or metadata.get("probe") != PROBE:
        raise ValueError(f"{folder} is not a finished `deer bear-dataset` run ({path} is missing or describes none)")
    odd = [field for field in ("dataset", "model") if not isinstance(metadata.get(field, {}), dict)]
    if odd:
        raise ValueError(f"{path}: its {odd[0]} entry is not a JSON object, so it describes no finished `deer bear-dataset` run")
    problems = []
    stored_digests = metadata.get("relation_digests")
    if not isinstance(stored_digests, dict):
        problems.append("it records no relation digests (made before they were kept), so nothing shows which data it "
                        "scored: run deer bear-dataset again")
    else:
        changed = [code for code, relation in dataset.relations.items() if stored_digests.get(code) != relation.digest()]
        if changed:
            problems.append(f"relations scored on other data (templates, answers or instances edited, or not scored): "
                            f"{', '.join(changed)}")
    if (instances := metadata.get("dataset", {}).get("instances")) != dataset.n_instances:
        problems.append(f"{instances} instances != {dataset.n_instances}")
    if problems:
        raise ValueError(f"{folder} is not a BEAR run of this data: " + "; ".join(problems))
    return metadata


def bear_scoring(runner) -> dict:
    """How this command's BEAR would score on ``runner``, as ``deer bear-dataset``'s metadata records it."""
    from deer.probes import get_probe

    method = runner.statement_scorer(get_probe("bear").options["pll_variant"]).statements_method
    return {"backend": runner.name, "scoring": method, "statement_rule": STATEMENT_RULE}


def stored_bear_table(folder: str | Path, dataset: BearDataset, loaded: LoadedModel, scoring: dict | None = None) -> pd.DataFrame:
    """BEAR's instances from a finished ``deer bear-dataset`` run; ValueError unless it scored the same weights,
    tokenizer and dtype on the same data, as ``scoring`` (``bear_scoring``) says."""
    folder = Path(folder)
    metadata = check_bear_run(folder, dataset)
    model = metadata.get("model", {})
    made_by = {**(scoring or {}), "toolkit": deer.__version__}  # another version may score otherwise
    recorded = {**metadata, "toolkit": toolkit_version(metadata)}
    problems = [f"{name} {recorded.get(name)!r}, this command's BEAR {value!r}" for name, value in made_by.items()
                if recorded.get(name) != value]
    now = as_written(loaded.metadata())  # as this model's own run would record it
    for key, name in (("fingerprint", "model fingerprint"), ("tokenizer_fingerprint", "tokenizer fingerprint"),
                      ("bos", "BOS policy"), ("dtype", "dtype")):
        recorded = model.get(key, now[key] if key == "dtype" else None)  # a run before dtypes were recorded: as now
        if recorded != now[key]:
            problems.append(f"{name} {recorded or 'not recorded (a run made before it was)'} != {now[key]}")
    if problems:
        raise ValueError(f"{folder} is not a BEAR run of this model and scoring: " + "; ".join(problems)
                         + "; make one with `deer bear-dataset` of this model, --dtype and --backend (default --pll-variant)")
    rows = sum(len(relation) * len(relation.templates) for relation in dataset.relations.values())  # one per (instance, template)
    return read_stored_table(find_instances_table(folder), INSTANCE_COLUMNS, rows)

