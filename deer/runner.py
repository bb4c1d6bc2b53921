"""The runner: probes, a task, a model and the options -> a result, the same way for every probe.

    check inputs -> read the data -> load the model -> length guard (the probes' texts)
    -> the probe scores -> rank (``deer.platform.ranking``) -> metrics -> save

Probes (``deer.probes``) only score; the one run loop, ``score_probes``, ranks every task by the one rank step
(``deer.platform.rank_step``: a KG's one streamed set with its known-true filters, a benchmark's many small sets)
into the layout's rows: a KG's ranks (``KGRows``: ``run_kg``, ``run_probe``), a cloze run's rows, resumable by
parts (``cloze_rows``: ``run_cloze``, ``bear_ref.dataset``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

import deer
from deer.backends import ModelBackend, as_backend, backend_class, backend_name_for, can_cache, refuse_cache_on
from deer.backends.models import DEFAULT_MODEL, LoadedModel
from deer.base.errors import check_count, check_flag, check_instance, check_mapping, check_path, wrong_type
from deer.base.files import package_versions, write_json, write_table
from deer.platform.benchmark_rows import RANK_RULE, rank_columns, ranking_rows, task_digest, task_frame
from deer.platform.distributed import world
from deer.platform.inputs import checked_out_folder, prepare, store_root
from deer.platform.kg_result import kg_result, run_metadata
from deer.platform.length_guard import guard_lengths
from deer.platform.metrics import cloze_metrics
from deer.platform.rank_step import TaskRanking, rank_task
from deer.platform.read_back import reusable_table
from deer.platform.result import QUERIES_TABLE, RunResult, combine_results, refuse_other_run
from deer.platform.run_options import Budget, ModelLoading, QuerySelection, gather_options, refuse_leftover
from deer.platform.run_spec import model_identity
from deer.platform.stores import key_digest
from deer.platform.task_texts import kg_benchmark_task
from deer.platform.templates import PromptTemplates
from deer.platform.validate import OptionError
from deer.probes import (
    Probe,
    ProbeRequest,
    check_model_kind,
    check_probe_inputs,
    get_probe,
    option_values,
    probe_names,
    probe_of,
    probes_of,
)
from kg_data.cloze import STATEMENT_RULE
from kg_data.task import Task

BENCHMARK_PROBES = ("deer", "lama", "bear")  # the probes a benchmark runs when none are named
HANDED_ON = "query_embeddings"  # a probe taking this option runs after one that returns the array (``deer.probes``)


def probe_options(probe: Probe, given: Mapping[str, Any]) -> dict:
    """The probe's defaults updated by ``given``, each checked against its ``OptionValues`` (refused by name)."""
    unknown = sorted(set(given) - set(probe.options))
    if unknown:
        known = ", ".join(probe.options) or "none"
        raise OptionError(unknown[0], given[unknown[0]], f"the {probe.name} probe has no such option (its options: {known})")
    return {**probe.options, **{name: option_values(probe, name).check(name, value) for name, value in given.items()}}


def recorded_options(options: Mapping[str, Any]) -> dict:
    """A probe's options as its metadata records them: an array handed on (``HANDED_ON``) only as "given" from outside."""
    recorded = {name: value for name, value in options.items() if name != HANDED_ON}
    return recorded if options.get(HANDED_ON) is None else {**recorded, HANDED_ON: "given"}


def run_probe(probe: str | Probe, /, kg="wn18rr", model=DEFAULT_MODEL, *, selection: QuerySelection | None = None,
              templates: PromptTemplates | None = None, loading: ModelLoading | None = None, budget: Budget | None = None,
              backend: str | None = None, cache: bool = False, out=None, show_progress: bool = True,
              distributed: bool = False, **options) -> RunResult:
    """``run_kg`` with one probe, the arguments ``deer.probe``'s; the other ``options`` are the probe's own."""
    probe = probe_of(probe)
    run_keywords = {key: options.pop(key) for key in ("cache_dir",) if key in options}
    run_options, options = gather_options(options, selection, templates, loading, budget)
    return run_kg([probe], kg, model, options={probe.name: options}, selection=run_options.selection,
                  templates=run_options.templates, loading=run_options.loading, budget=run_options.budget, backend=backend,
                  cache=cache, out=out, show_progress=show_progress, distributed=distributed, **run_keywords)


def run_kg(probes: Sequence[str | Probe], kg="wn18rr", model=DEFAULT_MODEL, *, options: Mapping[str, Mapping] | None = None,
           selection: QuerySelection | None = None, templates: PromptTemplates | None = None, loading: ModelLoading | None = None,
           budget: Budget | None = None, backend: str | None = None, cache: bool = False, out=None,
           show_progress: bool = True, **loose) -> RunResult:
    """Run ``probes`` (registered names or ``Probe`` objects) on a KG's queries, the model loaded once: one
    ``RunResult``, their ranks side by side in the order given, on the queries the one ranking fewest ranks (LAMA's
    ``single_token``).  ``model``: as ``deer.probe``'s, or a backend opened already (``open_backend``), run as it is;
    ``backend``: the backend to open a model on (None: hf, or the opened one's own).  ``options``: {probe name: its
    own options}; ``loose``: the option objects' fields as keywords, ``cache_dir=`` and ``distributed=``."""
    chosen = probes_of(probes)
    names = [probe.name for probe in chosen]
    if not chosen or len(set(names)) < len(names):
        raise ValueError(f"run_kg needs each probe once; got {', '.join(names) or 'none'}")
    backend = backend_name_for(model, backend)
    backend_class(backend)  # an unknown backend fails before any work
    cache_dir, distributed = loose.pop("cache_dir", None), loose.pop("distributed", False)
    check_run_arguments(cache=cache, show_progress=show_progress, distributed=distributed, out=out, cache_dir=cache_dir)
    refuse_cache_on(backend, cache)
    for own in (options, *(options or {}).values()) if isinstance(options, Mapping) else (options,):
        check_mapping("options", own)  # {probe name: {option: value}}
    run_options, rest = gather_options(loose, selection, templates, loading, budget)
    refuse_leftover(rest, "run_kg (a probe's own options go in options={probe: {...}})")
    stray = sorted(set(options or {}) - set(names))
    if stray:
        raise OptionError("options", stray[0], f"names no probe of this run ({', '.join(names)})")
    options = {probe.name: probe_options(probe, (options or {}).get(probe.name, {})) for probe in chosen}
    if distributed and cache:
        raise OptionError("cache", cache, "stores are not shared between processes; use cache=False with distributed=True")
    prepared = prepare(kg, model, run_options, out=out, backend=backend, show_progress=show_progress,
                       before_loading=lambda queries, templates: [
                           check_probe_inputs(probe, options[probe.name], queries, templates) for probe in chosen])
    loaded, chosen_templates = prepared.loaded, prepared.templates
    queries = queries_ranked(chosen, options, prepared.queries, loaded.tokenizer)  # so the folder is checked against them
    refuse_unhashed(loaded, "cache", cache, bool(cache), "use cache=False")
    scored = run(kg_benchmark_task(queries, chosen_templates), chosen, prepared.backend,
                 {name: {**own, "distributed": distributed} for name, own in options.items()},
                 stores=store_root(cache, cache_dir), layout=KGRows(loaded, chosen_templates, backend),
                 templates=chosen_templates, long_prompts=run_options.budget.long_prompts, show_progress=show_progress,
                 before_scoring=lambda task: checked_out_folder(out, task.texts.queries, loaded, chosen_templates))
    result = prepared.finish(combine_results([scored.ranked[name][0][1] for name in names]), scored.length_report)
    for name in names:  # scored and ranked now (a pass handed on counts in the probe that made it), as a cloze run records
        result.metadata_of(name)["seconds"] = scored.timings.get(f"{name}_seconds")
        result.metadata_of(name)["options"] = recorded_options(options[name])  # what a reuse of its ranks must match
    if out is not None and world()[0] == 0:  # checked again: a probe may rank fewer queries than it was given
        result.save(checked_out_folder(out, result.queries, loaded, chosen_templates))
    return result


def check_run_arguments(*, cache: bool = False, show_progress: bool = True, distributed: bool = False, **folders) -> None:
    """The run's own arguments, each of its type (a text for a flag would be read as true) and named; ``folders``:
    where it writes (``out``, ``cache_dir``, ``store_root``), each a str, a Path or None."""
    for name, flag in (("cache", cache), ("show_progress", show_progress), ("distributed", distributed)):
        check_flag(name, flag)
    for name, folder in folders.items():
        check_path(name, folder)


def queries_ranked(probes: Sequence[Probe], options: Mapping[str, Mapping], queries, tokenizer):
    """The queries every probe of the run ranks: the fewest any of them ranks (its ``queries_ranked``)."""
    for probe in probes:
        ranked = getattr(probe, "queries_ranked", None)
        queries = queries if ranked is None else ranked(queries, options[probe.name], tokenizer)
    return queries


def refuse_unhashed(loaded: LoadedModel, option: str, value, wanted: bool, instead: str) -> None:
    """A store asked for (``wanted``) on a model whose fingerprint hashes no weights (one in training) is an OptionError:
    what is stored under that fingerprint could be read back for other weights."""
    if wanted and not loaded.content_addressed:
        raise OptionError(option, value, f"{loaded.name}'s fingerprint ({loaded.fingerprint}) does not hash its "
                                         f"weights; nothing can be cached on it ({instead})")


def benchmark_probes(names: Sequence[str]) -> list[Probe]:
    """The probes named (in that order, once each); an unknown name is a ValueError naming the registered ones."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence) or not all(isinstance(name, str) for name in names):
        raise wrong_type("probes", names, f"a list of registered probes' names ({', '.join(probe_names())})")
    names, known = list(dict.fromkeys(names)), probe_names()
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"probes must be some of {', '.join(known)}; got {', '.join(unknown) or 'none'}")
    return [get_probe(name) for name in names]


def run_cloze(task: Task, runner: ModelBackend | LoadedModel, probes: Sequence[str] = BENCHMARK_PROBES,
              out: str | Path | None = None, token_budget: int | None = None, show_progress: bool = True,
              backend: str | None = None, store_root: str | Path | None = None) -> RunResult:
    """Score every query of a cloze benchmark with ``probes`` (registered names) on ``runner``, a backend opened on
    the model (``deer.backends.open_backend``; a ``LoadedModel`` is still taken for one release and opened on
    ``backend``, None: hf, with ``token_budget``): per query and probe the gold's realistic rank among the query's
    candidates (a non-finite score never beats it), the argmax prediction (first on a tie), whether it is the gold, and
    the gold's score.  With ``out``, each finished probe's rows are stored (``parts/<key>/<probe>.parquet``), so a
    stopped run resumes; with ``store_root``, DEER's candidate vectors go into the model's prompt store (neither on
    a backend that cannot cache or on unhashed weights)."""
    check_instance("task", task, Task, "a Task (kg_data.task)", allow_none=False)
    check_instance("runner", runner, (ModelBackend, LoadedModel), "a backend opened on the model (deer.backends.open_backend)",
                   allow_none=False)
    chosen = benchmark_probes(probes)
    backend = backend_name_for(runner, backend)
    backend_class(backend)  # an unknown backend fails before any work
    check_count("token_budget", token_budget, 1, allow_none=True)
    check_run_arguments(show_progress=show_progress, out=out, store_root=store_root)
    refuse_cache_on(backend, store_root is not None)
    loaded = runner.loaded if isinstance(runner, ModelBackend) else runner
    refuse_unhashed(loaded, "store_root", store_root, store_root is not None, "leave store_root out")
    refuse_other_run(out, QUERIES_TABLE, "a cloze run")
    runner = as_backend(runner, backend, token_budget=token_budget, show_progress=show_progress)
    digest = task_digest(task)
    key = {**model_identity(loaded), "task": digest, "rank_rule": RANK_RULE, "statement_rule": STATEMENT_RULE,
           "toolkit": deer.__version__, **runner.store_key}  # {} for hf; parts of another version's probes: scored again
    plain = not can_cache(backend) or not loaded.content_addressed  # a cross-check, or unhashed weights: nothing kept
    parts = None if out is None or plain else Path(out) / "parts" / key_digest(key)  # as every store and the BEAR data-set resume
    stores = None if plain or store_root is None else Path(store_root)
    scored = run(task, chosen, runner, parts=ClozeParts(parts, key), stores=stores, show_progress=show_progress)
    names = [probe.name for probe in chosen]
    shared = {"task": {"name": task.name, "queries": len(task.queries), "digest": digest, **task.info},
              "model": loaded.metadata(), "probes": names, "backend": backend, "rank_rule": RANK_RULE,
              "statement_rule": STATEMENT_RULE, "versions": package_versions()}
    metadata = {name: {"probe": name, **shared, **(scored.metadata[name] or [{}])[0],  # its work now, if scored now
                       "resumed": bool(scored.resumed[name]), "seconds": scored.timings.get(f"{name}_seconds")}
                for name in names}
    table = pd.concat([task_frame(task)] + [scored.rows(name) for name in names], axis=1)
    unscored = [name for name in names if table[f"{name}_rank"].isna().all()]
    if unscored:  # an all-NaN column ran and exited 0 (BEAR on LAMA's common vocabulary alone); stored parts resume a rerun
        raise ValueError(f"{task.name}: the {', '.join(unscored)} probe ranks none of the {len(table)} queries (candidate kinds "
                         f"{task.info.get('candidate_kinds', '-')}, modes {task.info.get('modes', '-')}; BEAR and statement-scored "
                         "LAMA queries rank a relation's objects only): add 'relation' to the candidates, or leave the probe out")
    result = RunResult(table, cloze_metrics(table), metadata, QUERIES_TABLE)
    if out is not None:
        result.save(out)
    return result


def run(task: Task, probes: Sequence[Probe], backend: ModelBackend, options: Mapping[str, Mapping] | None = None, *,
        parts: ClozeParts | None = None, stores: Path | None = None, layout=None, templates: PromptTemplates | None = None,
        long_prompts: str = "error", show_progress: bool = True, before_scoring=None) -> ScoredProbes:
    """The one run of every task, on an opened ``backend``: each probe's model kind checked and every text the probes
    feed the model guarded, once, before any forward pass (``guard_lengths``; ``long_prompts``: a KG's descriptions may
    be cut to fit), ``before_scoring(task)`` with the task as the guard leaves it (a KG's --out folder is checked
    against it), then scored, ranked and made the ``layout``'s rows, kept in ``parts`` (``score_probes``).  The
    entries build the task and their result of the answer: ``run_kg``, ``run_cloze``, ``bear_ref.dataset``."""
    for probe in probes:
        check_model_kind(probe, backend)
    if not task.queries:
        counts = list(task.info.get("counts", {}).values())  # LAMA's: why facts gave no query
        total = {key: sum(c[key] for c in counts) for key in ("facts", "object_not_in_vocabulary", "no_usable_sentence")}
        why = "" if not counts else (f" ({total['object_not_in_vocabulary']} of {total['facts']} facts have an object that is "
                                     f"not one token for this model, {total['no_usable_sentence']} no usable masked sentence)")
        raise ValueError(f"{task.name}: no query to score{why}")
    task, report = guard_lengths(task, probes, backend, templates, long_prompts)
    if before_scoring is not None:
        before_scoring(task)
    scored = score_probes(task, probes, backend, parts or NO_PARTS, options, stores, show_progress, templates,
                          layout or cloze_rows)
    scored.length_report = report
    return scored


@dataclasses.dataclass
class ClozeParts:
    """Where a cloze run keeps its finished rows: ``folder`` (None: nothing kept) holds ``key.json`` and one table
    per probe, or with ``by`` (a query field) per probe and group, named by the group's digest."""

    folder: Path | None
    key: dict
    by: str | None = None

    def path(self, probe: str, group, task: Task) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / (f"{probe}.parquet" if self.by is None else f"{probe}-{group}-{task_digest(task)}.parquet")

    def read(self, probe: str, group, task: Task) -> pd.DataFrame | None:
        """The group's stored rows, checked (``reusable_table``: a bad part is set aside with a warning), else None."""
        path = self.path(probe, group, task)
        return None if path is None else reusable_table(path, rank_columns(probe), len(task.queries),
                                                        f"the {probe} probe is scored again")

    def write(self, probe: str, group, task: Task, rows: pd.DataFrame) -> None:
        path = self.path(probe, group, task)
        if path is None:
            return
        if not (self.folder / "key.json").exists():  # written with the first finished part: a failed start leaves nothing
            write_json(self.folder / "key.json", self.key, "the resume parts' key")
        # atomic, with its content's digest, which a resumed run checks (``reusable_table``)
        write_table(path, rows, f"the {probe} probe's finished rows (a resume part)", digest=True)


NO_PARTS = ClozeParts(None, {})  # a run that keeps nothing between runs (a KG's: its probes resume in their stores)


def cloze_rows(task: Task, probe: Probe, scored, ranking: TaskRanking) -> pd.DataFrame:
    """A cloze run's rows of a probe: per query the gold's realistic rank in its own set, the first best candidate
    (``RANK_RULE``), whether it is the gold (an invalid gold score never is) and the gold's score."""
    return ranking_rows(task, ranking, probe.name).assign(**scored.columns)


@dataclasses.dataclass
class KGRows:
    """A KG run's ranks of a probe: the ranks table's rows of the task's queries (its ``QuerySet``, as the length
    guard left it), the metadata every KG probe shares, the metrics, as a one-probe ``RunResult``."""

    loaded: LoadedModel
    templates: PromptTemplates
    backend: str

    def __call__(self, task: Task, probe: Probe, scored, ranking: TaskRanking) -> RunResult:
        queries = task.texts.queries
        metadata = {**run_metadata(probe.name, queries, self.loaded, self.templates), **scored.metadata,
                    "backend": self.backend, "ranking_backend": ranking.where}
        metadata["timings"] = {**metadata.get("timings", {}), "ranking_seconds": ranking.seconds}
        return kg_result(probe.name, queries, ranking.ranks, ranking.top, metadata, tokenizer=self.loaded.tokenizer,
                         arrays=scored.arrays, head_above_gold=ranking.head_above_gold)


@dataclasses.dataclass
class ScoredProbes:
    """Per probe: (query rows, ranked part) per group, the metadata of groups scored now, the groups resumed, seconds;
    the length guard's report (``run``)."""

    ranked: dict
    metadata: dict
    resumed: dict
    timings: dict
    length_report: Any = None

    def rows(self, probe: str) -> pd.DataFrame:
        """A cloze run's rows of ``probe``, one per query in the task's order (its groups joined)."""
        return pd.concat([part.set_axis(rows) for rows, part in self.ranked[probe]]).sort_index().reset_index(drop=True)


def score_probes(task: Task, probes: Sequence[Probe], runner, parts: ClozeParts = NO_PARTS, options: Mapping | None = None,
                 stores: Path | None = None, show_progress: bool = True, templates: PromptTemplates | None = None,
                 layout=cloze_rows) -> ScoredProbes:
    """The one run loop: per group of the task's queries (``parts.by``), each probe in turn (one taking another's
    arrays after it, handed them), its stored rows reused or the group scored, ranked by the one rank step
    (``rank_task``, on the backend's device), made the layout's rows (``layout``: ``cloze_rows``, or ``KGRows`` for a
    KG) and stored.  ``options``: {probe name: its own options}; ``templates``: a KG's."""
    ordered = sorted(probes, key=lambda p: HANDED_ON in p.options)  # a probe taking another's vectors runs after it
    ranked, metadata, resumed = ({probe.name: [] for probe in probes} for _ in range(3))
    timings: dict[str, float] = {}
    for group, rows in _groups(task, parts.by):
        part_task = task if parts.by is None else task.subset(rows)
        handed: dict = {}
        for probe in ordered:
            stored = parts.read(probe.name, group, part_task)
            if stored is not None:
                ranked[probe.name].append((rows, stored))
                resumed[probe.name].append(group)
                continue
            request_options = {**probe.options, **(options or {}).get(probe.name, {}),
                               **{name: array for name, array in handed.items() if name in probe.options}}
            started = time.perf_counter()
            with runner.evaluation_mode():
                scored = probe.score(ProbeRequest(part_task, runner.loaded, runner, templates, stores, show_progress,
                                                  request_options))
            ranking = rank_task(part_task, scored, probe.name, device=runner.device, show_progress=show_progress)
            part = layout(part_task, probe, scored, ranking)
            parts.write(probe.name, group, part_task, part)
            ranked[probe.name].append((rows, part))
            handed.update(scored.arrays)
            metadata[probe.name].append(scored.metadata)
            timings[f"{probe.name}_seconds"] = timings.get(f"{probe.name}_seconds", 0.0) + time.perf_counter() - started
    return ScoredProbes(ranked, metadata, resumed, {name: round(seconds, 3) for name, seconds in timings.items()})


def _groups(task: Task, by: str | None) -> list[tuple]:
    """(group, its query rows) in the order the groups first appear."""
    if by is None:
        return [(None, list(range(len(task.queries))))]
    groups: dict = {}
    for i, query in enumerate(task.queries):
        groups.setdefault(getattr(query, by), []).append(i)
    return list(groups.items())
