"""``deer.probe``: the DEER probe from Python; the CLI, the experiments and training loops call it."""

from __future__ import annotations

from pathlib import Path

from deer.backends.models import DEFAULT_MODEL
from deer.platform.inputs import as_query_set
from deer.platform.result import RunResult
from deer.platform.run_options import Budget, ModelLoading, QuerySelection
from deer.platform.templates import PromptTemplates
from deer.runner import run_probe
from kg_data.queries import QuerySet


def probe(
    kg="wn18rr",
    model=DEFAULT_MODEL,
    *,
    selection: QuerySelection | None = None,
    templates: PromptTemplates | None = None,
    loading: ModelLoading | None = None,
    budget: Budget | None = None,
    backend: str | None = None,
    cache: bool = False,
    out=None,
    show_progress: bool = True,
    **options,
) -> RunResult:
    """Run DEER: rank every candidate tail for each (h, r, ?) query by cosine of PromptEOL embeddings.

    kg: 'wn18rr', a KG folder (str or Path), a ``TextualKG`` or a ``QuerySet`` (then the selection's
        split, subset and data_dir are not used).
    model: an alias (``deer models``), hub id or folder, loaded as ``loading`` says; or a model object
        (with ``tokenizer=``), a ``(model, tokenizer)`` pair or a ``LoadedModel``, used on its own device and
        dtype (in eval mode for the probe, then put back in train mode if it was training); or a backend opened
        already (``deer.backends.open_backend("vllm", ...)``), run as it is.
    The option objects (``deer.platform.run_options``), each also given as its fields, loose keywords:
    selection (``QuerySelection``): split='test'; subset=N samples N triples with seed=0 (candidates are
        then the entities of those triples); data_dir, the folder holding the named data sets ('wn18rr/';
        default: $DEER_DATA_DIR, then ../shared/data and $DEER_CACHE_DIR/data); exclude_head=False leaves
        each query's own head entity out of its candidates (the paper keeps it).
    templates (``PromptTemplates``): k_shot=8, shots, shot_seed (the few-shot examples' seed; default: seed),
        query_trailing_space, template_style='paper'.
    loading (``ModelLoading``): dtype='auto', device='auto' ('auto': CUDA when present); model_kwargs for
        ``from_pretrained`` (the CLI's ``--model-arg KEY=VALUE``); adapter, a PEFT adapter merged into the
        named model (``pip install '.[peft]'``); tokenizer, for a model given as an object.
    budget (``Budget``): token_budget, padded tokens per forward batch (None:
        ``deer.backends.batching.auto_batch_limits``); long_prompts: a prompt longer than the model's
        positions is an error ('error'), or descriptions are cut to fit ('truncate-descriptions'; the cuts
        are listed in ``metadata["length_guard"]``).
    backend: 'hf' (default; for an opened backend, its own) or 'plain' (one whole forward pass per prompt: a slow
        cross-check that cannot cache), or another registered one (``deer backends``).
    cache: reuse and store embeddings under cache_dir= (default $DEER_CACHE_DIR or ~/.cache/deer); refused
        on a backend that cannot cache.
    out: a folder to save the result in (beside other probes' results of the same run spec);
        refused before any work if it holds another spec's results.  None: nothing is written.
    query_embeddings=: the queries' vectors when already computed (``bear_ref.lama`` returns them): one row
        per query (checked before the model loads), as wide as the model's vectors (checked before encoding).
    distributed=True: inside a torch.distributed job (DDP), every process calls ``probe`` with the same
        arguments and encodes its share of the prompts; each gets the whole result, and only process 0
        writes ``out``.  No ``cache`` then.

    Every input is checked before the model is loaded: a bad option raises ``OptionError`` naming
    it (a value of the wrong type too: cache="no", seed=1.5), a bad data file ``KGFormatError`` naming file and
    line, a kg, model or option object of no accepted type ``TypeError`` naming the argument.
    Returns a :class:`RunResult` (``.metrics["hit@10"]``, ``.table``, ``.save(folder)``).
    """
    return run_probe("deer", kg, model, selection=selection, templates=templates, loading=loading, budget=budget, backend=backend,
                     cache=cache, out=out, show_progress=show_progress, **options)


def load_result(folder: str | Path, probe: str | None = None) -> RunResult:
    """A saved result (see :meth:`RunResult.load`)."""
    return RunResult.load(folder, probe)


def load_queries(kg="wn18rr", split: str = "test", subset: int | None = None, seed: int = 0, data_dir=None,
                 exclude_head: bool = False) -> QuerySet:
    """The queries of a KG (name, folder or ``TextualKG``) to hand to several probes: every triple
    of ``split``, or ``subset`` of them sampled with ``seed`` (candidates: their entities)."""
    return as_query_set(kg, split, subset, seed, data_dir, exclude_head)
