"""``bear_ref.bear``, ``bear_ref.lama`` and ``bear_ref.bear_dataset``: the reference probes from Python.

Same inputs and result type as ``deer.probe``, so results of one run spec join into one table.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from bear_ref.dataset import DEFAULT_DOMAIN_SUPPORT, DEFAULT_TIES, check_out_dir, run_bear_dataset
from bear_ref.kg_probe import BearProbe
from deer.backends import as_backend, backend_class, backend_name_for
from deer.backends.hf import STATEMENT_TOKEN_BUDGET
from deer.backends.models import DEFAULT_MODEL
from deer.base.errors import OptionError, check_count, check_names, check_path, wrong_type
from deer.base.model_spec import with_loading
from deer.platform.bear_accuracy import metric_convention
from deer.platform.inputs import check_inputs
from deer.platform.result import RunResult
from deer.platform.run_options import Budget, ModelLoading, refuse_leftover, settle, take
from deer.runner import check_run_arguments, run_probe
from kg_data.bear import BearDataset, load_bear_dataset


def bear(kg="wn18rr", model=DEFAULT_MODEL, *, pll_variant: str = "within_word_l2r", cache: bool = False, **options) -> RunResult:
    """BEAR on a KG: rank candidates by the summed log-likelihood of each whole statement
    (DEER's query text closed with ' t_name)'; pseudo log-likelihood for masked LMs).

    pll_variant: masked LMs' PLL variant ('within_word_l2r' or 'original').
    cache: store score rows under ``cache_dir`` so an interrupted run resumes.
    Every other option as ``deer.probe`` (token_budget None: 512 statement tokens per batch).
    Work is queries x candidates statements.
    """
    return run_probe("bear", kg, model, pll_variant=pll_variant, cache=cache, **options)


def lama(kg="wn18rr", model=DEFAULT_MODEL, *, single_token: bool = False, **options) -> RunResult:
    """LAMA on a KG: rank candidates by log p(first token of ' t_name)') right after the query text.

    single_token: LAMA's own protocol, only candidates (and gold tails) whose name is one token;
    ``result.queries`` are then those.  Every other option as ``deer.probe``.  DEER's query vectors
    from the same pass are kept as ``result.arrays["query_embeddings"]`` (``deer.probe(..., query_embeddings=...)``).
    """
    return run_probe("lama", kg, model, single_token=single_token, **options)


@dataclasses.dataclass(frozen=True)
class DatasetSelection:
    """Which part of a BEAR-format data set: ``relations`` (codes; None: all), at most ``max_instances``
    per relation sampled with ``seed``, read from ``data_dir`` (default: the data roots)."""

    data_dir: Any = None
    relations: Sequence[str] | None = None
    max_instances: int | None = None
    seed: int = 0

    def __post_init__(self):  # each field's type, named (as QuerySelection's)
        check_path("data_dir", self.data_dir)
        check_names("relations", self.relations)
        settle(self, max_instances=check_count("max_instances", self.max_instances, 1, allow_none=True),
               seed=check_count("seed", self.seed, 0))


def bear_dataset(dataset="bear", model=DEFAULT_MODEL, *, selection: DatasetSelection | None = None,
                 loading: ModelLoading | None = None, budget: Budget | None = None, pll_variant: str = "within_word_l2r",
                 domain_support: str = DEFAULT_DOMAIN_SUPPORT, ties: str = DEFAULT_TIES, backend: str | None = None,
                 out=None, show_progress: bool = True, **options) -> RunResult:
    """The BEAR score of a data set in the lm-pub-quiz format ('bear', 'bear-big', a folder or a
    ``BearDataset``): accuracy per template, its mean and spread, per relation, domain and cardinality.

    selection (``DatasetSelection``, or its fields as keywords: relations=, max_instances=, seed=, data_dir=):
        a subset (relation codes; at most N instances per relation).
    loading (``ModelLoading``, or dtype=, device=, model_kwargs=, adapter=, tokenizer=): as ``deer.probe``.
    budget (``Budget``, or token_budget=): padded statement tokens per batch (None: 512).
    domain_support/ties: the metric convention (lm-pub-quiz 0.3.3's by default).
    model: as ``deer.probe``'s, or a backend opened already (``deer.backends.open_backend``).
    backend: what scores the statements: 'hf' (a prefix trie; None: hf, or the opened backend's own), 'plain' (one
        forward pass per statement) or another registered one.
    out: finished relations are stored there (an interrupted run resumes) and the result saved.
    """
    if not isinstance(dataset, (str, os.PathLike, BearDataset)):
        raise wrong_type("dataset", dataset, "'bear', 'bear-big', a data set folder (str or Path) or a BearDataset")
    selection, loading = take(options, DatasetSelection, selection, "selection"), take(options, ModelLoading, loading, "loading")
    budget = take(options, Budget, budget, "budget")
    refuse_leftover(options, "bear_dataset")
    token_budget = STATEMENT_TOKEN_BUDGET if budget.token_budget is None else budget.token_budget
    backend = backend_name_for(model, backend)
    backend_class(backend)  # an unknown backend fails before any work
    BearProbe.option_values["pll_variant"].check("pll_variant", pll_variant)  # as BEAR on a KG checks it
    metric_convention(domain_support, ties)  # known names, before the model loads
    check_run_arguments(show_progress=show_progress, out=out)
    model = with_loading(model, loading.model_kwargs, loading.adapter)
    check_inputs(model, out=out, seed=selection.seed, token_budget=token_budget, dtype=loading.dtype, device=loading.device,
                 max_instances=selection.max_instances, long_prompts=budget.long_prompts, benchmark=True)
    relations = list(selection.relations) if selection.relations else None
    chosen = {"relations": relations, "max_instances": selection.max_instances, "seed": selection.seed}
    if isinstance(dataset, BearDataset):  # scored as it was loaded: a selection is not applied to it again
        if (relations or selection.max_instances is not None or selection.seed != 0) and chosen != dataset.selection:
            loaded_with = dataset.selection or "no selection"
            raise OptionError("selection", chosen, f"the BearDataset given was loaded with {loaded_with}; pass the selection "
                                                   "to load_bear_dataset (or the data set's name here)")
        chosen = dataset.selection or chosen  # what the data holds is what the run records
    data = dataset if isinstance(dataset, BearDataset) else load_bear_dataset(
        dataset, selection.data_dir, relations=relations, max_instances=selection.max_instances, seed=selection.seed)
    if out is not None:
        check_out_dir(out)  # another kind of run there: refused before the model loads
    runner = as_backend(model, backend, tokenizer=loading.tokenizer, dtype=loading.dtype, device=loading.device,
                        token_budget=budget.token_budget, show_progress=show_progress)  # None: 512 statement tokens
    return run_bear_dataset(data, runner, out, chosen, pll_variant=pll_variant, show_progress=show_progress,
                            domain_support=domain_support, ties=ties)
