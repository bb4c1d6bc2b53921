"""The option objects of a KG run (which queries, how the model is loaded, how much a batch holds; the prompts are
``PromptTemplates``), and ``gather_options``, which turns the Python API's loose keywords into them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from deer.base.errors import OptionError
from deer.platform.templates import PromptTemplates


@dataclasses.dataclass(frozen=True)
class QuerySelection:
    """Which queries of a KG: every triple of ``split``, or ``subset`` of them sampled with ``seed``."""

    split: str = "test"
    subset: int | None = None
    seed: int = 0
    data_dir: Any = None
    exclude_head: bool = False

    def __post_init__(self):
        if not isinstance(self.exclude_head, bool):  # "False" would be read as true
            raise OptionError("exclude_head", self.exclude_head, "must be True or False")


@dataclasses.dataclass(frozen=True)
class ModelLoading:
    """How a model given by name is loaded ('auto': CUDA when present, bfloat16 there), ``model_kwargs`` for
    ``from_pretrained`` and a PEFT ``adapter``; ``tokenizer``: that of a model given as an object."""

    dtype: str = "auto"
    device: str = "auto"
    model_kwargs: Mapping[str, Any] | None = None
    adapter: Any = None
    tokenizer: Any = None


@dataclasses.dataclass(frozen=True)
class Budget:
    """Padded tokens a forward batch may hold (None: the device's default); what to do with a prompt too long."""

    token_budget: int | None = None
    long_prompts: str = "error"


def templates_from(k_shot: int = 8, shots: str | None = None, shot_seed: int | None = None,
                   query_trailing_space: bool | None = None, template_style: str = "paper", *, subset_seed: int = 0) -> PromptTemplates:
    """``PromptTemplates`` from the loose keywords; the few-shot seed is ``shot_seed``, else the subset's."""
    seed = subset_seed if shot_seed is None else shot_seed
    return PromptTemplates(k_shot=k_shot, shots=shots, seed=seed, query_trailing_space=query_trailing_space, style=template_style)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Everything but the probe's own options, gathered (``gather_options``)."""

    selection: QuerySelection
    templates: PromptTemplates
    loading: ModelLoading
    budget: Budget


def gather_options(options: Mapping[str, Any], selection: QuerySelection | None = None, templates: PromptTemplates | None = None,
                   loading: ModelLoading | None = None, budget: Budget | None = None) -> tuple[RunOptions, dict]:
    """The loose keywords in ``options`` gathered into their objects (where not given), and what is left: the
    probe's own options.  A keyword given beside its object with another value is refused: it would be ignored."""
    rest = dict(options)
    selection = take(rest, QuerySelection, selection, "selection")
    return RunOptions(selection, take(rest, templates_from, templates, "templates", subset_seed=selection.seed),
                      take(rest, ModelLoading, loading, "loading"), take(rest, Budget, budget, "budget")), rest


_ABSENT = object()  # a keyword the given object has no field of


def take(rest: dict, build, given, name: str, **fixed):
    """``given``, else ``build`` called with the keywords of ``rest`` it takes (removed from ``rest``); one given
    beside ``given`` with another value than the object's is an OptionError naming it."""
    parameters = inspect.signature(build).parameters
    loose = {key: rest.pop(key) for key, p in parameters.items() if p.kind is not p.KEYWORD_ONLY and key in rest}
    clashing = [key for key, value in loose.items()
                if value is not getattr(given, key, _ABSENT) and value != getattr(given, key, _ABSENT)]
    if given is not None and clashing:
        raise OptionError(clashing[0], loose[clashing[0]], f"given beside {name}=: set it in the {name} object instead")
    return given if given is not None else build(**loose, **fixed)


def refuse_leftover(rest: Mapping[str, Any], where: str) -> None:
    """A keyword no option object took: an OptionError naming it and ``where``."""
    if rest:
        name = sorted(rest)[0]
        raise OptionError(name, rest[name], f"{where} has no such option")
