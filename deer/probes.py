"""The probe seam: what a probe is, and the registry that is the only list of probes.

A probe hands the run's length guard the texts it feeds the model and has one scoring method,
``score(request)``, of the one task type: queries over named candidate sets (``kg_data.task.Task``: a cloze
benchmark's many small ones, or a KG's one streamed set; the texts made of either by ``deer.platform.task_texts``).
It never ranks, saves or caches (``deer.runner`` does).  An array it returns in ``arrays`` under another
probe's option name is handed to that probe (LAMA's pass gives DEER its ``query_embeddings``).
Probes register through the ``deer.probes`` entry point group, e.g. in a package's pyproject.toml:

    [project.entry-points."deer.probes"]
    shortest = "my_package.shortest:ShortestNameProbe"

or, from a running Python session, with :func:`register_probe`.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from deer.backends.models import RANDOM_HEAD
from deer.base.errors import OptionError, check_flag, wrong_type

ENTRY_POINT_GROUP = "deer.probes"
# The built-in probes: a checkout used through PYTHONPATH, without installing, has them too.
BUILT_IN = {"deer": "deer.embedding_probe:DeerProbe", "bear": "bear_ref.kg_probe:BearProbe",
            "lama": "bear_ref.lama_probe:LamaProbe"}


@dataclasses.dataclass
class ProbeRequest:
    """Everything a probe scores with (the backend its only way to the model; ``store_root`` None: nothing stored)."""

    task: Any  # kg_data.task.Task
    loaded: Any  # deer.backends.models.LoadedModel
    backend: Any  # deer.backends.Backend
    templates: Any  # deer.platform.templates.PromptTemplates (None on a benchmark: its queries hold their texts)
    store_root: Path | None = None
    show_progress: bool = True
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ProbeScores:
    """A probe's answer: ``scores``, {query index: scores over its candidate set, in the set's order}, higher = better
    (a query left out is not ranked), or vectors to rank by cosine: ``query_vectors`` (n_queries, width) and
    ``candidate_vectors`` {set name: one row per candidate, or a store's vectors}; ``arrays`` are kept on the result
    and handed to later probes; ``columns``: per-query columns for a cloze run's rows."""

    scores: dict | None = None
    query_vectors: np.ndarray | None = None
    candidate_vectors: dict | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    arrays: dict = dataclasses.field(default_factory=dict)
    columns: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if (self.scores is None) == (self.query_vectors is None or self.candidate_vectors is None):
            raise ValueError("a probe returns either scores or query and candidate vectors")


@dataclasses.dataclass(frozen=True)
class OptionValues:
    """What a probe option accepts, declared beside its default: values of ``kind`` (bool, int, float, str,
    or "vectors": a 2-D numeric array) within ``choices``, ``minimum``, ``maximum`` where given; None if ``optional``."""

    kind: type | str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False

    def check(self, option: str, value):
        """``value`` as the probe takes it (numpy's bools and integers as Python's), or an OptionError naming ``option``
        (a text is no boolean here: the command line reads --probe-option's true/false as booleans)."""
        if value is None and self.optional:
            return None
        if self.kind is bool:  # the API's one boolean check
            return check_flag(option, value)
        if not self.fits(value):
            raise OptionError(option, value, f"must be {self.describe()}")
        return int(value) if self.kind is int else value  # numpy's integer as Python's (the metadata is JSON)

    def fits(self, value) -> bool:
        if self.kind == "vectors":  # its rows and width are the probe's to check (queries, model)
            try:
                array = np.asarray(value)
            except (ValueError, TypeError):  # ragged rows
                return False
            return array.ndim == 2 and np.issubdtype(array.dtype, np.number)
        numeric = {int: numbers.Integral, float: numbers.Real}.get(self.kind)  # numpy's numbers too
        if isinstance(value, bool) or not isinstance(value, numeric or self.kind):
            return False  # True is no number here (Python's bool is an int), nor a choice's text
        return ((not self.choices or value in self.choices) and (self.minimum is None or value >= self.minimum)
                and (self.maximum is None or value <= self.maximum))

    def describe(self) -> str:
        """What fits, in words: 'true or false', 'one of a, b', 'an integer >= 1', ..."""
        if self.choices:
            text = "one of " + ", ".join(map(str, self.choices))
        else:
            names = {bool: "true or false", int: "an integer", float: "a number", str: "a text", "vectors": "a 2-D numeric array"}
            bounds = [f"{sign} {bound}" for sign, bound in ((">=", self.minimum), ("<=", self.maximum)) if bound is not None]
            text = " ".join([names.get(self.kind, getattr(self.kind, "__name__", str(self.kind))), *bounds])
        return text + (" or None" if self.optional else "")


def option_values(probe: Probe, name: str) -> OptionValues:
    """What ``probe``'s option ``name`` accepts: its declaration, else its default's type."""
    default = probe.options[name]
    return getattr(probe, "option_values", {}).get(name) or OptionValues(object if default is None else type(default))


class Probe(Protocol):
    """What the runner asks of a probe (a class with these attributes; see ``deer.embedding_probe``)."""

    name: str  # registry name, column prefix in tables (``NAME_rank_filtered``) and results' probe name
    summary: str  # one line for --help and listings
    options: Mapping[str, Any]  # the probe's own options with their defaults; any other is refused by name
    option_values: Mapping[str, OptionValues]  # what each option accepts; a value that does not fit is refused by name
    # Optional: ``length_checks(task, templates, backend)``, the texts it feeds the model (``LengthCheck``s of
    # ``deer.platform.length_guard``: the run's one guard counts them through the backend before any forward
    # pass; a probe without it feeds nothing to check), ``causal_lm_only`` (default False: True refuses a
    # masked LM before any work; ``causal_lm_only_on_kg``: on a KG's task (with ``known`` answers) only; ``reads_lm_head``, default True:
    # False lets a causal checkpoint without its head run, ``check_model_kind``),
    # ``queries_ranked(queries, options, tokenizer)`` (the KG queries it ranks where fewer than given) with
    # ``folder_suffix(options)`` (what that adds to the default run folder's name), and
    # ``check_before_loading(options, queries, templates)``: raises on options that do not fit the KG's
    # queries or the templates, before the model loads.

    def score(self, request: ProbeRequest) -> ProbeScores:
        """Score ``request.task`` through ``request.backend`` only: {query index: float64 scores over its candidate
        set, higher = better; NaN or -inf never beats the gold}, or query and candidate vectors.  Never ranks, saves
        or caches."""
        ...


_REGISTERED: dict[str, Callable[[], Probe]] = {}


def register_probe(name: str, factory: Callable[[], Probe], replace: bool = False) -> None:
    """Make a probe available by ``name`` (``factory()`` builds it).  A name is taken once unless ``replace``."""
    if name in _REGISTERED and not replace:
        raise ValueError(f"a probe named '{name}' is already registered")
    _REGISTERED[name] = factory


def _load_entry_points() -> None:
    """Register the built-in probes and the installed packages' ones (each imported when used)."""
    for name, target in BUILT_IN.items():
        module, attribute = target.split(":")
        _REGISTERED.setdefault(name, lambda module=module, attribute=attribute: getattr(import_module(module), attribute)())
    for entry in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in _REGISTERED:
            _REGISTERED[entry.name] = lambda entry=entry: entry.load()()


def probe_names() -> list[str]:
    """Every registered probe: DEER first, then the others by name."""
    _load_entry_points()
    return sorted(_REGISTERED, key=lambda name: (name != "deer", name))


def get_probe(name: str) -> Probe:
    """The probe registered as ``name``; an unknown name is an error listing the known ones."""
    if name not in _REGISTERED:
        _load_entry_points()
    if name not in _REGISTERED:
        raise KeyError(f"unknown probe '{name}'; registered: {', '.join(probe_names())}")
    probe = _REGISTERED[name]()
    if probe.name != name:
        raise ValueError(f"probe registered as '{name}' calls itself '{probe.name}'")
    return as_probe(probe)


def probe_of(probe, argument: str = "probe") -> Probe:
    """A probe argument of the API: a registered name, or a probe object (``as_probe``); else a TypeError naming it."""
    if isinstance(probe, str):
        return get_probe(probe)
    if isinstance(probe, (Mapping, bytes)) or not hasattr(probe, "name") or not hasattr(probe, "options"):
        raise wrong_type(argument, probe, f"a registered probe's name ({', '.join(probe_names())}) or a probe object")
    return as_probe(probe)


def probes_of(probes, argument: str = "probes") -> list[Probe]:
    """A list of probe arguments (``probe_of``); a single name, where a list goes, is a TypeError naming it."""
    if isinstance(probes, (str, bytes, Mapping)) or not isinstance(probes, Sequence):
        raise wrong_type(argument, probes, "a list of registered probes' names or probe objects")
    return [probe_of(probe, argument) for probe in probes]


# 0.1's protocol, gone before 0.2: what a probe written for it does now (each is refused by name, not ignored)
OLD_PROTOCOL = {"score_benchmark": "score_benchmark is read no more: one method, score(request), scores every task",
                "text_kind": "text_kind is read no more: the length guard checks the texts a probe hands it by "
                             "length_checks(task, templates, backend)"}


def as_probe(probe) -> Probe:
    """``probe`` checked to have ``score(request)`` and nothing of 0.1's protocol (``OLD_PROTOCOL``)."""
    old = [name for name in OLD_PROTOCOL if getattr(probe, name, None) is not None]
    if old:
        raise ValueError(f"probe '{probe.name}' is written for 0.1's protocol: "
                         + "; ".join(OLD_PROTOCOL[name] for name in old))
    if not callable(getattr(probe, "score", None)):
        raise ValueError(f"probe '{probe.name}' has no score(request): every probe scores queries over candidate sets")
    return probe


def check_probe_inputs(probe: Probe, options: Mapping[str, Any], queries, templates) -> None:
    """The probe's ``check_before_loading``, where it has one."""
    check = getattr(probe, "check_before_loading", None)
    if check is not None:
        check(options, queries, templates)


# What runs on a masked LM, for the refusals' messages.
ON_A_MASKED_LM = "on a masked LM run bear on a KG, or lama on a cloze benchmark (through its mask filler)"


def check_model_kind(probe: Probe, backend, task=None) -> None:
    """Refuse, before any work, a model whose LM head was drawn at random for a probe that reads it (``reads_lm_head``),
    and a masked LM for a probe that reads a causal LM only (``causal_lm_only``), or only on a KG's task
    (``causal_lm_only_on_kg``: such a probe calls this with its task, before its first pass)."""
    missing_head = getattr(getattr(backend, "model", None), RANDOM_HEAD, ())
    if missing_head and getattr(probe, "reads_lm_head", True):
        raise ValueError(f"the {probe.name} probe reads the LM head, which the checkpoint of {backend.loaded.name} lacks "
                         f"({', '.join(missing_head)}): it would be random; give a checkpoint with its LM head "
                         "(DEER reads none and runs)")
    if not backend.is_masked_lm:
        return
    if getattr(probe, "causal_lm_only", False):
        raise ValueError(f"the {probe.name} probe needs a causal LM; {backend.loaded.name} is a masked LM "
                         f"(DEER embeds with PromptEOL: {ON_A_MASKED_LM})")
    if getattr(probe, "causal_lm_only_on_kg", False) and task is not None and task.known is not None:
        raise ValueError(f"the {probe.name} probe needs a causal LM on a KG; {backend.loaded.name} is a masked LM (LAMA on a KG "
                         f"reads the next token after the query text, which a masked LM does not predict: {ON_A_MASKED_LM})")
