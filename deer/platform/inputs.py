"""What the Python API accepts (a KG, a model, template settings), turned into what the probes take, in that
order (:func:`prepare`): a bad KG is reported before a model is loaded.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from deer.backends import ModelBackend, as_backend
from deer.backends.models import LoadedModel, check_model_config
from deer.base.errors import wrong_type
from deer.base.model_spec import check_adapter, loading_options, with_loading
from deer.platform.length_guard import LONG_PROMPT_MODES, LengthReport, guard_lengths
from deer.platform.result import RunResult
from deer.platform.run_options import QuerySelection, RunOptions
from deer.platform.run_spec import RunSpec, check_folder_spec
from deer.platform.stores import flush_seconds
from deer.platform.task_texts import kg_benchmark_task
from deer.platform.templates import PromptTemplates
from deer.platform.validate import OptionError, check_model_source, check_out_folder, check_run_options, warn
from kg_data.kg import TextualKG
from kg_data.load import load_kg
from kg_data.locate import cache_root
from kg_data.queries import QuerySet, build_queries

KG_ACCEPTED = "a KG name ('wn18rr'), a KG folder (str or Path), a TextualKG or a QuerySet"
MODEL_ACCEPTED = ("an alias (`deer models`), a hub id, a model folder (str or Path), open_model(...), a (model, tokenizer) pair "
                  "or an opened backend (deer.backends.open_backend(...))")


def check_model_argument(model) -> None:
    """``model`` is a name or folder, a ``LoadedModel``, an opened backend, or a model object, alone or with its tokenizer."""
    first = model[0] if isinstance(model, tuple) and len(model) == 2 else model
    if not (isinstance(model, (LoadedModel, ModelBackend, str, os.PathLike)) or hasattr(first, "parameters") and hasattr(first, "config")):
        raise wrong_type("model", model, MODEL_ACCEPTED)


def as_query_set(kg, split: str = "test", subset: int | None = None, seed: int = 0, data_dir=None,
                 exclude_head: bool = False) -> QuerySet:
    """A QuerySet as given, or the queries of ``split`` (``subset`` sampled with ``seed``) of a KG given as a
    ``TextualKG``, a name or a folder.  ``exclude_head`` (also for a QuerySet): no query ranks its own head."""
    if not isinstance(kg, (str, os.PathLike, TextualKG, QuerySet)):
        raise wrong_type("kg", kg, KG_ACCEPTED)
    QuerySelection(split, subset, seed, data_dir, exclude_head)  # each checked by name, as the API's keywords are
    if isinstance(kg, QuerySet):
        return dataclasses.replace(kg, exclude_head=True) if exclude_head else kg
    knowledge_graph = kg if isinstance(kg, TextualKG) else load_kg(kg, data_dir)
    return build_queries(knowledge_graph, split, subset, seed, exclude_head=exclude_head)


@dataclasses.dataclass
class PreparedRun:
    """What a probe runs on, checked: the queries, the model, the templates."""

    queries: QuerySet
    loaded: LoadedModel
    templates: PromptTemplates
    backend: Any = None  # the backend opened on the model (deer.backends.ModelBackend)

    def finish(self, result: RunResult, length_report: LengthReport) -> RunResult:
        """Add the few-shot examples each query got (``k_shot_used``) and the length guard's report."""
        used = self.templates.examples_used(result.queries.kg, result.queries.triples)
        result.table.insert(result.table.columns.get_loc("n_filtered") + 1, "k_shot_used", used)
        for probe in result.probes:
            result.metadata_of(probe).update(k_shot=few_shot_summary(self.templates.k_shot, used),
                                             length_guard=length_report.to_metadata())
        return result


def few_shot_summary(asked: int, used: np.ndarray) -> dict:
    return {"asked": int(asked), "used_min": int(used.min()) if len(used) else None,
            "used_max": int(used.max()) if len(used) else None, "queries_with_fewer": int(np.sum(used < asked))}


def warn_about_few_shot(queries: QuerySet, templates: PromptTemplates) -> None:
    """Say so when queries get fewer few-shot examples than asked (no train split, a small one)."""
    if templates.k_shot == 0 or not len(queries):
        return
    train = queries.kg.splits.get("train")
    if train is None or len(train) == 0:
        warn(f"KG '{queries.kg.name}' has no train triples to draw few-shot examples from: every query runs "
             f"zero-shot (k_shot {templates.k_shot} asked, 0 used; recorded in the metadata)")
        return
    used = templates.examples_used(queries.kg, queries.triples)
    fewer = int(np.sum(used < templates.k_shot))
    if fewer:
        warn(f"{fewer} of {len(queries)} queries get fewer than k_shot={templates.k_shot} few-shot examples "
             f"(as few as {int(used.min())}): the train split has only {len(train)} triples; "
             "the column k_shot_used records each query's count")


def check_inputs(model, *, out=None, subset=None, seed: int = 0, k_shot: int | None = None, token_budget: int | None = None,
                 dtype: str | None = None, device: str | None = None, long_prompts: str = "error",
                 max_instances: int | None = None, out_option: str = "out", benchmark: bool = False) -> None:
    """Check the options, the output folder and a model folder; ``benchmark``: texts with no descriptions to cut."""
    named_model = isinstance(model, (str, os.PathLike))
    check_run_options(subset=subset, seed=seed, k_shot=k_shot, token_budget=token_budget, max_instances=max_instances,
                      dtype=dtype if named_model else None, device=device if named_model else None)
    modes = LONG_PROMPT_MODES[:1] if benchmark else LONG_PROMPT_MODES
    if long_prompts not in modes:
        where = " on a benchmark: its texts hold no descriptions to cut" if benchmark else ""
        raise OptionError("long_prompts", long_prompts, f"must be one of {', '.join(modes)}{where}")
    check_out_folder(out, out_option)
    flush_seconds()  # $DEER_STORE_FLUSH_SECONDS read now, not when the first store part is written
    check_model_source(model)
    if named_model:  # a ModelSpec's loading options (reserved keywords, the adapter), then the config they make
        check_adapter(loading_options(model)[1])
        check_model_config(model)


def prepare(kg, model, options: RunOptions, *, out=None, before_loading=None, backend: str | None = None,
            show_progress: bool = True) -> PreparedRun:
    """Check the inputs, load the data, the templates and last the model (opening the ``backend`` on it, or taking an
    opened backend as it is: ``deer.backends.as_backend``): a bad input fails before the model loads (the run's length
    guard, ``deer.runner.run``, before any forward pass).  ``before_loading(queries, templates)``: a probe's own checks,
    made before the model loads."""
    selection, loading, budget, templates = options.selection, options.loading, options.budget, options.templates
    check_model_argument(model)
    model = with_loading(model, loading.model_kwargs, loading.adapter)
    check_inputs(model, out=out, subset=selection.subset, seed=selection.seed, token_budget=budget.token_budget,
                 dtype=loading.dtype, device=loading.device, long_prompts=budget.long_prompts)
    queries = as_query_set(kg, selection.split, selection.subset, selection.seed, selection.data_dir, selection.exclude_head)
    warn_about_few_shot(queries, templates)
    if before_loading is not None:
        before_loading(queries, templates)
    runner = as_backend(model, backend, tokenizer=loading.tokenizer, dtype=loading.dtype, device=loading.device,
                        token_budget=budget.token_budget, show_progress=show_progress)
    return PreparedRun(queries, runner.loaded, templates, runner)


def fitted_queries(queries: QuerySet, probes, runner, templates: PromptTemplates, long_prompts: str,
                   check: bool = False) -> QuerySet:
    """The queries as the run's length guard leaves them: the KG its run spec records, so a folder is named and
    checked by it before the run.  ``check``: guarded in 'error' mode too (before Ray workers start, say)."""
    if long_prompts == "error" and not check:  # nothing is cut: no second pass of the guard over every text
        return queries
    return guard_lengths(kg_benchmark_task(queries, templates), probes, runner, templates, long_prompts)[0].texts.queries


def store_root(cache: bool, cache_dir=None) -> Path | None:
    """Root of the stores: None without ``cache``, else ``cache_dir`` or the default."""
    if not cache:
        return None
    return Path(cache_dir).expanduser() if cache_dir is not None else cache_root()


def checked_out_folder(out, queries: QuerySet, loaded: LoadedModel, templates: PromptTemplates) -> Path | None:
    """``out`` as a Path, refused now (before any work) if it holds results of another run spec."""
    if out is None:
        return None
    out = Path(out)
    check_folder_spec(out, RunSpec.build(queries, loaded, templates))
    return out
