"""The runner: a probe, a KG's queries, a model and the options -> a result, the same way for every probe.

    check inputs -> read the data -> load the model -> length guard (the probe's texts)
    -> probe.score -> rank (one kernel, ``deer.core.ranking``) -> metrics -> save

Probes (``deer.probes``) only score; ranking, metrics, the run spec, the result type and the run
folder are made here once.  ``deer.probe``, ``bear_ref.bear`` and ``bear_ref.lama`` are this call
with their probe's name.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
from collections.abc import Mapping
from typing import Any

from deer.backends import DEFAULT_BACKEND, backend_class, open_backend
from deer.core.distributed import world
from deer.core.inputs import as_templates, checked_out_folder, prepare, store_root
from deer.core.model_spec import with_loading
from deer.core.models import DEFAULT_MODEL, evaluation_mode
from deer.core.ranking import rank_cosine, rank_scores
from deer.core.result import ProbeResult, kg_result, run_metadata
from deer.core.templates import PromptTemplates
from deer.core.validate import OptionError
from deer.probes import Probe, ProbeRequest, get_probe


@dataclasses.dataclass(frozen=True)
class QuerySelection:
    """Which queries of a KG: every triple of ``split``, or ``subset`` of them sampled with ``seed``
    (candidates: their entities); ``exclude_head``: no query ranks its own head entity."""

    split: str = "test"
    subset: int | None = None
    seed: int = 0
    data_dir: Any = None
    exclude_head: bool = False


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much a forward batch may hold (padded tokens; None: the device's default) and what to do
    with a prompt longer than the model's positions ('error' or 'truncate-descriptions')."""

    token_budget: int | None = None
    long_prompts: str = "error"


SELECTION_KEYWORDS = tuple(field.name for field in dataclasses.fields(QuerySelection))
TEMPLATE_KEYWORDS = ("k_shot", "shots", "query_trailing_space", "template_style")
BUDGET_KEYWORDS = tuple(field.name for field in dataclasses.fields(Budget))


def gather_options(selection: QuerySelection | None, templates: PromptTemplates | None, budget: Budget | None,
                   options: Mapping[str, Any]) -> tuple[QuerySelection, PromptTemplates, Budget, dict]:
    """The Python API's loose keywords (``split=``, ``k_shot=``, ``token_budget=``, ...) gathered into
    their objects; what is left are the probe's own options.  A keyword set to other than its default
    beside its object (``templates=`` and ``k_shot=3``) is refused by name: it would be ignored."""
    rest = dict(options)

    def gather(keywords, given, build, name):
        loose = {key: rest.pop(key) for key in keywords if key in rest}
        defaults = {key: p.default for key, p in inspect.signature(build).parameters.items()}
        clashing = [key for key, value in loose.items() if not (value is defaults.get(key) or value == defaults.get(key))]
        if given is not None and clashing:
            raise OptionError(clashing[0], loose[clashing[0]], f"given beside {name}=: set it in the {name} object instead")
        return given if given is not None else build(**loose)

    selection = gather(SELECTION_KEYWORDS, selection, QuerySelection, "selection")
    templates = gather(TEMPLATE_KEYWORDS, templates, functools.partial(as_templates, seed=selection.seed), "templates")
    return selection, templates, gather(BUDGET_KEYWORDS, budget, Budget, "budget"), rest


def probe_options(probe: Probe, given: Mapping[str, Any]) -> dict:
    """The probe's own options: its defaults updated by ``given``; an option it does not have is
    refused by name, listing the ones it has."""
    unknown = sorted(set(given) - set(probe.options))
    if unknown:
        known = ", ".join(probe.options) or "none"
        raise OptionError(unknown[0], given[unknown[0]], f"the {probe.name} probe has no such option (its options: {known})")
    return {**probe.options, **given}


def run_probe(probe: str | Probe, kg="wn18rr", model=DEFAULT_MODEL, *, tokenizer=None,
              selection: QuerySelection | None = None, templates: PromptTemplates | None = None,
              budget: Budget | None = None, dtype: str = "auto", device: str = "auto", backend: str = DEFAULT_BACKEND,
              cache: bool = False, cache_dir=None, out=None, show_progress: bool = True, distributed: bool = False,
              model_kwargs: Mapping[str, Any] | None = None, adapter=None, **options) -> ProbeResult:
    """Run one probe (a registered name or a ``Probe``) on a KG and rank its candidates.

    kg: a name ('wn18rr'), a folder, a ``TextualKG`` or a ``QuerySet`` (then ``selection`` is unused).
    selection, templates, budget: which queries, the prompts, the batch size (each an object, or its
        fields as loose keywords: ``split=``, ``subset=``, ``k_shot=``, ``token_budget=``, ... as ``deer.probe``).
    model: an alias, hub id or folder (loaded with ``dtype`` on ``device``), or a model object with
        ``tokenizer=``, a (model, tokenizer) pair or a ``LoadedModel``, used as it is.
    model_kwargs, adapter: for a model given by name, keywords for ``from_pretrained`` (trust_remote_code,
        attn_implementation, revision, ...) and a PEFT adapter merged into it (``deer.core.model_spec``).
    backend: what runs the model (``deer.backends``): 'hf' (the optimised kernels) or 'plain' (one whole
        forward pass per prompt or statement, a cross-check: it never reads or writes stores).
    cache: the probe's resumable work (embeddings, score rows) is stored under ``cache_dir`` (default
        $DEER_CACHE_DIR or ~/.cache/deer) and reused.  The Python API writes nothing unless asked
        (cache=False by default; the CLI caches unless --no-cache).  out: a folder to save the result in.
    distributed: in a torch.distributed job every process calls this with the same arguments; only
        process 0 writes ``out``.  options: the probe's own (``get_probe(name).options``).
    Every input is checked before the model is loaded.
    """
    probe = get_probe(probe) if isinstance(probe, str) else probe
    backend_class(backend)  # an unknown backend fails before any work
    model = with_loading(model, model_kwargs, adapter)
    selection, templates, budget, options = gather_options(selection, templates, budget, options)
    options = probe_options(probe, options)
    if distributed and cache:
        raise OptionError("cache", cache, "stores are not shared between processes; use cache=False with distributed=True")
    run = prepare(kg, model, text_kind=probe.text_kind, tokenizer=tokenizer, split=selection.split, subset=selection.subset,
                  seed=selection.seed, data_dir=selection.data_dir, templates=templates, dtype=dtype, device=device, out=out,
                  token_budget=budget.token_budget, long_prompts=budget.long_prompts, exclude_head=selection.exclude_head)
    checked_out_folder(out, run.queries, run.loaded, run.templates)
    runner = open_backend(backend, run.loaded, token_budget=budget.token_budget, show_progress=show_progress)
    stores = store_root(resolve_cache(cache, run.loaded) and backend == DEFAULT_BACKEND, cache_dir)
    request = ProbeRequest(run.queries, run.loaded, runner, run.templates, stores, show_progress, {**options, "distributed": distributed})
    with evaluation_mode(run.loaded.model):
        scored = probe.score(request)
    scored.metadata["backend"] = backend
    result = rank_and_report(probe.name, scored, run.queries, run.loaded, run.templates)
    result = run.finish(result)
    if out is not None and world()[0] == 0:  # checked again: a probe may rank fewer queries than it was given
        result.save(checked_out_folder(out, result.queries, run.loaded, run.templates))
    return result


def resolve_cache(cache: bool, loaded) -> bool:
    """``cache``, checked: a model whose fingerprint is an identity given for it (a model in
    training) names no weights, so storing under it could hand vectors to other weights later."""
    if cache and not loaded.content_addressed:
        raise OptionError("cache", cache, f"{loaded.name}'s fingerprint ({loaded.fingerprint}) does not hash its weights; "
                                          "nothing can be cached on it (use cache=False)")
    return cache


def rank_and_report(name: str, scored, queries, loaded, templates) -> ProbeResult:
    """Rank a probe's scores (or vectors, by cosine on the model's device) into a ``ProbeResult``."""
    queries = scored.queries if scored.queries is not None else queries
    started = time.perf_counter()
    if scored.scores is not None:
        ranking, backend = rank_scores(scored.scores, queries), "torch on cpu"
    else:  # the score matrix is made chunk by chunk on the model's device and never leaves it
        device = next(loaded.model.parameters()).device
        ranking = rank_cosine(scored.query_vectors, scored.candidate_vectors, queries, device=device)
        backend = f"torch on {device}"
    metadata = {**run_metadata(name, queries, loaded, templates), **scored.metadata, "ranking_backend": backend}
    metadata["timings"] = {**metadata.get("timings", {}), "ranking_seconds": time.perf_counter() - started}
    return kg_result(name, queries, ranking.ranks, ranking.top, metadata, tokenizer=loaded.tokenizer,
                     arrays=scored.arrays, head_above_gold=ranking.head_above_gold)
