"""The option objects of a KG run (which queries, how the model is loaded, how much a batch holds; the prompts are
``PromptTemplates``), and ``gather_options``, which turns the Python API's loose keywords into them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from deer.base.errors import OptionError, check_count, check_flag, check_instance, check_path, check_text
from deer.base.model_spec import check_loading
from deer.platform.templates import PromptTemplates


@dataclasses.dataclass(frozen=True)
class QuerySelection:
    """Which queries of a KG: every triple of ``split``, or ``subset`` of them sampled with ``seed``."""

    split: str = "test"
    subset: int | None = None
    seed: int = 0
    data_dir: Any = None
    exclude_head: bool = False

    def __post_init__(self):  # each field's type, named (exclude_head="False" would be read as true, seed=1.5 as 1)
        check_text("split", self.split)
        settle(self, subset=check_count("subset", self.subset, 1, allow_none=True), seed=check_count("seed", self.seed, 0),
               exclude_head=check_flag("exclude_head", self.exclude_head))
        check_path("data_dir", self.data_dir)


@dataclasses.dataclass(frozen=True)
class ModelLoading:
    """How a model given by name is loaded ('auto': CUDA when present, bfloat16 there), ``model_kwargs`` for
    ``from_pretrained`` and a PEFT ``adapter``; ``tokenizer``: that of a model given as an object."""

    dtype: str = "auto"
    device: str = "auto"
    model_kwargs: Mapping[str, Any] | None = None
    adapter: Any = None
    tokenizer: Any = None

    def __post_init__(self):
        check_loading(self.dtype, self.device, self.model_kwargs, self.adapter)


@dataclasses.dataclass(frozen=True)
class Budget:
    """Padded tokens a forward batch may hold (None: the device's default); what to do with a prompt too long."""

    token_budget: int | None = None
    long_prompts: str = "error"

    def __post_init__(self):  # the long_prompts a run takes depends on the run (check_inputs)
        settle(self, token_budget=check_count("token_budget", self.token_budget, 1, allow_none=True))
        check_text("long_prompts", self.long_prompts)


def settle(options, **checked) -> None:
    """Set a frozen option object's fields to their checked values (numpy's integers and bools as Python's)."""
    for name, value in checked.items():
        object.__setattr__(options, name, value)


def templates_from(k_shot: int = 8, shots: str | None = None, shot_seed: int | None = None,
                   query_trailing_space: bool | None = None, template_style: str = "paper", *, subset_seed: int = 0) -> PromptTemplates:
    """``PromptTemplates`` from the loose keywords; the few-shot seed is ``shot_seed``, else the subset's."""
    check_text("template_style", template_style)  # by the keyword's name (the object's field is ``style``)
    seed = subset_seed if shot_seed is None else check_count("shot_seed", shot_seed, 0)
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
    return RunOptions(selection, take(rest, templates_from, templates, "templates", kind=PromptTemplates, subset_seed=selection.seed),
                      take(rest, ModelLoading, loading, "loading"), take(rest, Budget, budget, "budget")), rest


_ABSENT = object()  # a keyword the given object has no field of


def take(rest: dict, build, given, name: str, kind: type | None = None, **fixed):
    """``given`` (a ``kind``: ``build`` where it is a class; else a TypeError naming ``name``), else ``build`` called with
    the keywords of ``rest`` it takes (removed from ``rest``); one given beside ``given`` is checked as ``build`` checks
    it, and with another value than the object's is an OptionError naming it."""
    kind = kind or build
    check_instance(name, given, kind, f"a {kind.__name__} or None (or its fields as keywords)")
    parameters = inspect.signature(build).parameters
    loose = {key: rest.pop(key) for key, p in parameters.items() if p.kind is not p.KEYWORD_ONLY and key in rest}
    if given is None:
        return build(**loose, **fixed)
    for key, value in loose.items():
        build(**{key: value}, **fixed)  # its type, named, before it is compared (an array has no one truth value)
        if not same(value, getattr(given, key, _ABSENT)):
            raise OptionError(key, value, f"given beside {name}=: set it in the {name} object instead")
    return given


def same(value, other) -> bool:
    """Whether a loose keyword says what the object's field says (a numpy integer equals its int)."""
    try:
        return value is other or bool(value == other)
    except (TypeError, ValueError):  # a comparison with no one answer: not the same
        return False


def refuse_leftover(rest: Mapping[str, Any], where: str) -> None:
    """A keyword no option object took: an OptionError naming it and ``where``."""
    if rest:
        name = sorted(rest)[0]
        raise OptionError(name, rest[name], f"{where} has no such option")
