"""Options and error handling shared by every `deer` command, each written once."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import click

from deer.backends import DEFAULT_BACKEND
from deer.backends.batching import CPU_TOKEN_BUDGET
from deer.backends.models import DEFAULT_MODEL
from deer.platform.validate import DTYPES
from kg_data.task import shorten

if TYPE_CHECKING:
    from deer.platform.run_options import RunOptions


class _OneValueOptions:
    """Refuses a one-value option given twice: click keeps the last value and drops the others without a word
    (`--probe lama --probe deer` ran DEER alone).  Options that take several (``multiple``) are unaffected."""

    def make_parser(self, ctx):
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_args(args):
            opts, rest, order = parse(args=args)  # order: each option as often as it was given
            given = [p for p in order if isinstance(p, click.Option) and p.expose_value and not (p.multiple or p.count)]
            if (twice := next((p for p in given if given.count(p) > 1), None)) and not ctx.resilient_parsing:  # completion: lenient
                raise click.UsageError(f"{' / '.join(twice.opts + twice.secondary_opts)} given {given.count(twice)} times; "
                                       "it takes one value: give it once", ctx)
            return opts, rest, order

        parser.parse_args = parse_args
        return parser


class OneValueCommand(_OneValueOptions, click.Command):
    """Every `deer` command."""


class OneValueGroup(_OneValueOptions, click.Group):
    """Every `deer` command group; the commands it makes are ``OneValueCommand``s."""

    command_class = OneValueCommand
    group_class = type


class UserFacingError(click.ClickException):
    """Printed as 'Error: ...' with exit code 1, never as a traceback."""


def debug_requested() -> bool:
    """`deer --debug ...` or DEER_DEBUG=1: show tracebacks instead of one-line messages."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get("deer.debug")) or os.environ.get("DEER_DEBUG", "") not in ("", "0")


def friendly_errors(command):
    """Every error as one line on stderr and exit code 1 (unless --debug): a user's error as its message, an
    unexpected one with its traceback in a file named in the line.  Ctrl-C: exit code 130, saying how to resume."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from deer.backends.models import ModelUnavailableError
        from deer.base.extras import MissingExtraError
        from deer.platform.stores import CacheKeyMismatch
        from deer.platform.validate import OptionError
        from kg_data.errors import KGFormatError, KGNotFoundError

        try:
            with deer_warnings_as_lines():
                return command(*args, **kwargs)
        except click.ClickException:
            raise
        except (KeyboardInterrupt, Exception) as error:
            if debug_requested():
                raise  # the whole traceback: an internal ValueError is a bug, not bad input
            if isinstance(error, KeyboardInterrupt):
                click.echo("\nInterrupted. Finished work is kept in the caches; run the same command again to resume.", err=True)
                sys.exit(130)
            if isinstance(error, OptionError):
                raise UserFacingError(error.cli_message()) from None
            if isinstance(error, (ModelUnavailableError, MissingExtraError, KGFormatError, KGNotFoundError, CacheKeyMismatch,
                                  ValueError, OSError)):
                raise UserFacingError(str(error)) from None
            where = write_traceback(error)  # a bug: one line here, the traceback in a file
            summary = shorten(" ".join(str(error).split()), 300)  # one line
            raise UserFacingError(f"unexpected {type(error).__name__}: {summary} (traceback in {where}; "
                                  "rerun with `deer --debug ...` to see it, and please report it)") from None

    return wrapper


def write_traceback(error: BaseException) -> Path:
    """The full traceback in a file under the cache folder (logs/); its path."""
    from deer.base.files import write_text
    from kg_data.locate import cache_root

    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    path = cache_root() / "logs" / f"error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    try:
        write_text(path, text)
    except OSError:
        path = Path(tempfile.gettempdir()) / path.name
        path.write_text(text)
    return path


@contextlib.contextmanager
def deer_warnings_as_lines():
    """Show the toolkit's warnings (``DeerWarning``) as 'Warning: ...' lines on stderr."""
    from tqdm.auto import tqdm

    from deer.platform.validate import DeerWarning

    original = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DeerWarning):  # tqdm.write: a line of its own, also while a progress bar runs
            tqdm.write(f"Warning: {message}", file=sys.stderr)
        else:
            original(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original


def _remember_loading_option(ctx, param, value):
    """--model-arg / --adapter are read (eagerly) before --model, whose names then carry them."""
    if param.name == "model_args":
        try:
            value = parse_key_values(value, "--model-arg")
        except click.BadParameter as error:
            raise click.BadParameter(error.message, ctx, param) from None
    ctx.meta[f"deer.{param.name}"] = value


def loading_of(ctx, name):
    """``name`` as a ``ModelSpec`` carrying the command's --model-arg and --adapter (as given when there are none)."""
    from deer.base.model_spec import with_loading

    return with_loading(name, ctx.meta.get("deer.model_args") or None, ctx.meta.get("deer.adapter"))


def _one_model(ctx, param, value):
    """The --model of a one-model command, with its loading options; given twice it is refused (click kept the last)."""
    if len(value) > 1:
        raise click.BadParameter(f"this command probes one model, given {len(value)}: {', '.join(value)} (run it once per "
                                 "model, or use `deer cloze` / `deer experiment`, which take several)", ctx, param)
    return loading_of(ctx, value[0] if value else DEFAULT_MODEL)


def one_model_option(help_text: str):
    """--model of a one-model command (``_one_model``): one name, default ``DEFAULT_MODEL``."""
    return click.option("--model", "model_name", multiple=True, callback=_one_model, metavar="NAME",
                        help=f"{help_text} [default: {DEFAULT_MODEL}]")


def models_or_default(model_names) -> list:
    """The repeated --model names, or the default model with the --model-arg / --adapter."""
    return list(model_names) or [loading_of(click.get_current_context(), DEFAULT_MODEL)]


def stacked(*options):
    """One decorator applying ``options`` as if each were written above the command, in this order."""

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def model_options(multiple: bool = False):
    """--model (repeatable with ``multiple``) / --model-arg / --adapter / --dtype / --device."""
    if multiple:
        model = click.option("--model", "model_names", multiple=True,
                             callback=lambda ctx, _, names: tuple(loading_of(ctx, name) for name in names),
                             help=f"Model alias, hub id or folder; repeat for several (default {DEFAULT_MODEL}).")
    else:
        model = one_model_option("Alias (see `deer models`), hub id (facebook/opt-1.3b) or local folder.")
    return stacked(
        model,
        click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE", is_eager=True, expose_value=False,
                     callback=_remember_loading_option, help="A from_pretrained keyword, repeatable, as lm-eval's --model_args: "
                          "trust_remote_code=true, attn_implementation=eager, revision=step1000; true/false/null and numbers, "
                          "in JSON's or Python's spelling (True/False/None), are read typed, any other value as text; "
                          "recorded in metadata.json and part of the model's fingerprint."),
        click.option("--adapter", type=click.Path(), default=None, is_eager=True, expose_value=False,
                     callback=_remember_loading_option, help="A PEFT adapter (LoRA, ...; folder or hub id) merged into the "
                          "model's weights (pip install '.[peft]'); with several --model, into each."),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                     help="Weights and activations dtype; auto: float32 on the CPU, bfloat16 on a GPU "
                          "that supports it, else float16."),
        click.option("--device", default="auto", show_default=True,
                     help="torch device: auto (cuda:0 when torch sees a GPU, else cpu), cpu, cuda:0, ..."),
    )


data_dir_option = click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                               help="Folder holding the data sets (wn18rr/, bear/, ...); default: $DEER_DATA_DIR, "
                                    "../shared/data, $DEER_CACHE_DIR/data (~/.cache/deer/data).")
seed_option = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                           help="Seed of the subset (and of the few-shot examples, unless --shot-seed).")


def kg_options(subset: bool = True):
    """--kg/--data-dir/--split/--seed (and --subset), shared by the KG probes and experiments."""
    subset_option = click.option("--subset", type=click.IntRange(min=1), default=None,
                                 help="Sample N triples of the split (paper protocol: candidates = entities of those triples); "
                                      "with --kg lama|bear|bear-big: at most N facts per relation.")
    return stacked(
        click.option("--kg", default="wn18rr", show_default=True,
                     help="'wn18rr' or a folder with a KG in the TSV/JSONL format; or a cloze benchmark: 'lama', "
                          "'bear', 'bear-big' (see `deer cloze`; --subset is then at most N facts per relation)."),
        data_dir_option,
        click.option("--split", type=click.Choice(["train", "valid", "test"]), default="test", show_default=True,
                     help="Split whose triples are the queries."),
        *[subset_option] * subset,
        seed_option,
    )


template_options = stacked(
    click.option("--k-shot", type=click.IntRange(min=0), default=8, show_default=True,
                 help="Few-shot examples per query (fewer where the train split has fewer; each query's count "
                      "is recorded as k_shot_used)."),
    click.option("--shot-seed", type=click.IntRange(min=0), default=None,
                 help="Seed of the few-shot examples (default: --seed's value)."),
    click.option("--shots", type=click.Choice(["per-query", "shared"]), default=None,
                 help="Resample the few-shot examples for every query (paper style's default) or use one set for all "
                      "(the authors' style, which allows only this)."),
    click.option("--query-trailing-space/--no-query-trailing-space", default=None,
                 help="Paper style: end the DEER query with ', ' as the paper's text does (default: end at the comma, "
                      "where BEAR/LAMA split the statement, so DEER and LAMA share one pass; see README). "
                      "The authors' style always ends with ', '."),
    click.option("--template-style", type=click.Choice(["paper", "authors"]), default="paper", show_default=True,
                 help="Query text. paper: the paper's '(h, r, t)' example lines, then '(h, r,' (examples per query, "
                      "seeded by seed, head and relation). authors: byte for byte the DEER authors' package "
                      "deer-probe 0.1.1: one example set shared by all queries, then 'h - h_description' and '(h, r, ' "
                      "(implies --shots shared and the trailing space; LAMA then refuses, its next token being read at "
                      "the comma). The tail prompt is the same in both; BEAR scores ' t)' after the query text up to the comma."),
)


def run_options_of(given) -> RunOptions:
    """The option objects a KG run takes, from a command's parsed options."""
    from deer.platform.run_options import Budget, ModelLoading, QuerySelection, RunOptions, templates_from

    selection = QuerySelection(given["split"], given.get("subset"), given["seed"], given["data_dir"], given.get("exclude_head", False))
    templates = templates_from(given["k_shot"], given["shots"], given.get("shot_seed"), given["query_trailing_space"],
                               given["template_style"], subset_seed=given["seed"])
    return RunOptions(selection, templates, ModelLoading(given.get("dtype", "auto"), given.get("device", "auto")),
                      Budget(given.get("token_budget"), given.get("long_prompts", "error")))


exclude_head_option = click.option("--exclude-head", is_flag=True,
                                   help="Leave each query's own head entity out of its candidates (the paper keeps it; "
                                        "metrics.json counts under head/ how often it outranks the gold tail either way).")


def kg_run_options(multiple_models: bool = False, exclude_head: bool = True):
    """What every command that probes a KG takes: the KG, model and template options, and --exclude-head (``exclude_head``)."""
    return stacked(kg_options(), model_options(multiple=multiple_models), template_options, *[exclude_head_option] * exclude_head)


def out_option(help_text: str, default=None):
    return click.option("--out", "out_dir", type=click.Path(file_okay=False), default=default,
                        show_default=default is not None, help=help_text)


def token_budget_option(default: int | None, help_text: str = f"Max padded tokens per forward batch (default: {CPU_TOKEN_BUDGET} "
                                                               "on the CPU, from the free memory on a GPU)."):
    return click.option("--token-budget", type=click.IntRange(min=1), default=default, show_default=default is not None,
                        help=help_text)


def _known_backend(ctx, param, value):
    """An unknown --backend is refused while the options are read, before anything loads."""
    from deer.backends import backend_names

    if value not in backend_names():
        raise click.BadParameter(f"unknown backend '{value}'; known: {', '.join(backend_names())}", ctx, param)
    return value


backend_option = click.option("--backend", default=DEFAULT_BACKEND, show_default=True, callback=_known_backend,
                              help="What runs the model: 'hf' (batched, shared prefixes, tries) or 'plain' (one whole forward "
                                   "pass per prompt or statement: a slow cross-check that reads and writes no cache); "
                                   "`deer backends` lists them.")


PYTHON_LITERALS = {"True": True, "False": False, "None": None}  # Python's spellings, beside JSON's true/false/null


def parse_key_values(pairs, option: str) -> dict:
    """``("by=words", "single_token=False")`` -> ``{"by": "words", "single_token": False}``: a value is read
    as JSON where it parses (numbers, true/false in any case, null) or as Python's True/False/None, else kept as text
    (a 'False' kept as text would be truthy)."""
    options = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise click.BadParameter(f"'{pair}' is not KEY=VALUE", param_hint=option)
        try:
            text = value.strip()
            text = text.capitalize() if text.lower() in ("true", "false") else text  # FALSE too: the API takes no text for a bool
            options[key.strip()] = PYTHON_LITERALS[text] if text in PYTHON_LITERALS else json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


# What the cloze-benchmark path of `deer experiment agreement|screen --kg lama|bear|bear-big` reads (``run_benchmark_of``;
# --subset as facts per relation), beside each command's own ``honoured``.
BENCHMARK_OPTIONS = {"kg", "data_dir", "subset", "seed", "model_names", "dtype", "device", "out_dir", "token_budget", "no_cache",
                     "model_args", "adapter"}


def refuse_given(names, why: str) -> None:
    """A UsageError naming each of ``names`` (parameter names) given on the command line, as spelt there (--model-arg):
    a path of the command that does not read them."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = [param.opts[0] for param in ctx.command.params
             if param.name in names and ctx.get_parameter_source(param.name) == ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)}: {why}")


def refuse_options_the_benchmarks_ignore(kg: str, honoured=()) -> None:
    """A UsageError naming every option given that the benchmark path ignores (it reads ``BENCHMARK_OPTIONS``, ``honoured``)."""
    params = click.get_current_context().command.params
    applies = BENCHMARK_OPTIONS | set(honoured)
    refuse_given({param.name for param in params} - applies,
                 f"not for --kg {kg}, a cloze benchmark (options that apply there: "
                 f"{', '.join(param.opts[0] for param in params if param.name in applies)}; `deer cloze --help` has the rest)")
