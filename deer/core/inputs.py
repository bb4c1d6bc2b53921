"""What the Python API accepts, turned into what the probes take.

Every probe function (``deer.probe``, ``bear_ref.bear``, ``bear_ref.lama``) takes a KG as a name,
a folder, a ``TextualKG`` or a ready ``QuerySet``; a model as a name, a folder, a loaded
:class:`~deer.core.models.LoadedModel` or a model object with its tokenizer; and the template
settings or a ``PromptTemplates``.  :func:`prepare` resolves them in that order, so a bad KG is
reported before a model is loaded.
"""

from __future__ import annotations

from pathlib import Path

from deer.core.models import LoadedModel, as_loaded_model, cache_root
from deer.core.run_spec import RunSpec, check_folder_spec
from deer.core.templates import PromptTemplates
from kg_data.kg import TextualKG
from kg_data.load import load_kg
from kg_data.queries import QuerySet, build_queries


def as_query_set(kg, split: str = "test", subset: int | None = None, seed: int = 0, data_dir=None) -> QuerySet:
    """A QuerySet as given, or the queries of ``split`` (``subset`` sampled with ``seed``) of a KG
    given as a ``TextualKG``, a name ('wn18rr') or a folder (str or Path)."""
    if isinstance(kg, QuerySet):
        return kg
    knowledge_graph = kg if isinstance(kg, TextualKG) else load_kg(kg, data_dir)
    return build_queries(knowledge_graph, split, subset, seed)


def as_templates(templates: PromptTemplates | None = None, *, k_shot: int = 8, shots: str | None = None, seed: int = 0,
                 query_trailing_space: bool | None = None, template_style: str = "paper") -> PromptTemplates:
    """``templates`` as given, else built from the settings (see ``PromptTemplates``)."""
    if templates is not None:
        return templates
    return PromptTemplates(k_shot=k_shot, shots=shots, seed=seed, query_trailing_space=query_trailing_space, style=template_style)


def prepare(kg, model, *, tokenizer=None, split: str = "test", subset: int | None = None, seed: int = 0, data_dir=None,
            templates: PromptTemplates | None = None, k_shot: int = 8, shots: str | None = None,
            query_trailing_space: bool | None = None, template_style: str = "paper", dtype: str = "float32",
            device: str = "auto") -> tuple[QuerySet, LoadedModel, PromptTemplates]:
    """(queries, model, templates) for a probe run: data and templates first, the model last."""
    queries = as_query_set(kg, split, subset, seed, data_dir)
    templates = as_templates(templates, k_shot=k_shot, shots=shots, seed=seed, query_trailing_space=query_trailing_space,
                             template_style=template_style)
    return queries, as_loaded_model(model, tokenizer, dtype=dtype, device=device), templates


def store_root(cache: bool, cache_dir=None) -> Path | None:
    """Root of the embedding/score stores: None without ``cache``, else ``cache_dir`` or the default."""
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
