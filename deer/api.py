"""``deer.probe``: the DEER probe from Python; the CLI, the experiments and training loops call it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deer.platform.inputs import as_query_set
from deer.platform.models import DEFAULT_MODEL
from deer.platform.result import ProbeResult
from deer.platform.templates import PromptTemplates
from deer.runner import run_probe
from kg_data.queries import QuerySet


def probe(
    kg="wn18rr",
    model=DEFAULT_MODEL,
    *,
    tokenizer=None,
    split: str = "test",
    subset: int | None = None,
    seed: int = 0,
    data_dir=None,
    templates: PromptTemplates | None = None,
    k_shot: int = 8,
    shots: str | None = None,
    query_trailing_space: bool | None = None,
    template_style: str = "paper",
    dtype: str = "auto",
    device: str = "auto",
    backend: str = "hf",
    token_budget: int | None = None,
    cache: bool = False,
    cache_dir=None,
    out=None,
    show_progress: bool = True,
    query_embeddings: np.ndarray | None = None,
    long_prompts: str = "error",
    exclude_head: bool = False,
    distributed: bool = False,
    model_kwargs: dict | None = None,
    adapter=None,
) -> ProbeResult:
    """Run DEER: rank every candidate tail for each (h, r, ?) query by cosine of PromptEOL embeddings.

    kg: 'wn18rr', a KG folder (str or Path), a ``TextualKG`` or a ``QuerySet`` (then split,
        subset and data_dir are not used).  split/subset/seed: which queries (``subset`` samples
        N triples with ``seed``; candidates are then the entities of those triples).
    data_dir: the folder holding the named data sets ('wn18rr/'); when given, the only one searched
        (default: $DEER_DATA_DIR, then ../shared/data and $DEER_CACHE_DIR/data).
    model: an alias (``deer models``), hub id or folder, loaded with ``dtype`` on ``device``
        ('auto': CUDA when present); or a model object (with ``tokenizer=``), a ``(model,
        tokenizer)`` pair or a ``LoadedModel``, used on its own device and dtype (in eval mode
        for the probe, then put back in train mode if it was training).
    model_kwargs: for a model given by name, keywords for ``from_pretrained`` (``trust_remote_code``,
        ``attn_implementation``, ``revision``, ...; the CLI's ``--model-arg KEY=VALUE``).
    adapter: a PEFT adapter (folder or hub id) merged into the named model (``pip install '.[peft]'``).
    templates, or k_shot/shots/query_trailing_space/template_style: the prompts (``PromptTemplates``).
    backend: 'hf' (default) or 'plain' (one whole forward pass per prompt: a slow cross-check that
        reads and writes no cache).
    token_budget: padded tokens per forward batch (None: ``deer.backends.batching.auto_batch_limits``).
    cache: reuse and store embeddings under ``cache_dir`` (default $DEER_CACHE_DIR or ~/.cache/deer).
    out: a folder to save the result in (beside other probes' results of the same run spec);
        refused before any work if it holds another spec's results.  None: nothing is written.
    query_embeddings: the queries' vectors when already computed (``bear_ref.lama`` returns them): one row
        per query (checked before the model loads), as wide as the model's vectors (checked before encoding).
    exclude_head: leave each query's own head entity out of its candidates (the paper keeps it).
    long_prompts: a prompt longer than the model's positions is an error ('error'), or descriptions
        are cut to fit ('truncate-descriptions'; the cuts are listed in ``metadata["length_guard"]``).
    distributed: inside a torch.distributed job (DDP), every process calls ``probe`` with the same
        arguments and encodes its share of the prompts; each gets the whole result, and only
        process 0 writes ``out``.  No ``cache`` then.

    Every input is checked before the model is loaded: a bad option raises ``OptionError`` naming
    it, a bad data file ``KGFormatError`` naming file and line, a kg or model of no accepted type
    ``TypeError`` naming the argument.
    Returns a :class:`ProbeResult` (``.metrics["hit@10"]``, ``.table``, ``.save(folder)``).
    """
    return run_probe("deer", **locals())  # every argument above is run_probe's (loose keywords gathered there)


def load_result(folder: str | Path, probe: str | None = None) -> ProbeResult:
    """A saved result (see :meth:`ProbeResult.load`)."""
    return ProbeResult.load(folder, probe)


def load_queries(kg="wn18rr", split: str = "test", subset: int | None = None, seed: int = 0, data_dir=None,
                 exclude_head: bool = False) -> QuerySet:
    """The queries of a KG (name, folder or ``TextualKG``) to hand to several probes: every triple
    of ``split``, or ``subset`` of them sampled with ``seed`` (candidates: their entities)."""
    return as_query_set(kg, split, subset, seed, data_dir, exclude_head)
