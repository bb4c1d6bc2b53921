"""Options and error handling shared by every `deer` command, each written once."""

from __future__ import annotations

import functools
import os

import click

from deer.core.models import DEFAULT_MODEL

DTYPES = ["float32", "bfloat16", "float16"]


class UserFacingError(click.ClickException):
    """Printed as 'Error: ...' with exit code 1, never as a traceback."""


def debug_requested() -> bool:
    """`deer --debug ...` or DEER_DEBUG=1: show tracebacks instead of one-line messages."""
    ctx = click.get_current_context(silent=True)
    from_cli = bool(ctx is not None and ctx.find_root().meta.get("deer.debug"))
    return from_cli or os.environ.get("DEER_DEBUG", "") not in ("", "0")


def friendly_errors(command):
    """Turn the errors a user can cause (missing model/data, bad files) into clear messages."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from deer.core.extras import MissingExtraError
        from deer.core.models import ModelUnavailableError
        from deer.core.stores import CacheKeyMismatch
        from kg_data.errors import KGFormatError, KGNotFoundError

        try:
            return command(*args, **kwargs)
        except (ModelUnavailableError, MissingExtraError, KGFormatError, KGNotFoundError, CacheKeyMismatch, ValueError) as error:
            if debug_requested():
                raise  # the whole traceback: an internal ValueError is a bug, not bad input
            raise UserFacingError(f"{error}\n(run with `deer --debug ...` or DEER_DEBUG=1 for the traceback)") from None

    return wrapper


def model_options(multiple: bool = False):
    """--model (repeatable with ``multiple``) / --dtype / --device."""

    def decorate(command):
        command = click.option("--device", default="auto", show_default=True,
                               help="torch device: auto (cuda:0 when torch sees a GPU, else cpu), cpu, cuda:0, ...")(command)
        command = click.option("--dtype", type=click.Choice(DTYPES), default="float32", show_default=True,
                               help="Weights and activations dtype.")(command)
        if multiple:
            return click.option("--model", "model_names", multiple=True,
                                help=f"Model alias, hub id or folder; repeat for several (default {DEFAULT_MODEL}).")(command)
        return click.option("--model", "model_name", default=DEFAULT_MODEL, show_default=True,
                            help="Alias (see `deer models`), hub id (facebook/opt-1.3b) or local folder.")(command)

    return decorate


def data_dir_option(command):
    return click.option(
        "--data-dir", type=click.Path(file_okay=False), default=None,
        help="Folder holding the data sets (wn18rr/, bear/, ...); default: $DEER_DATA_DIR, ../shared/data, ~/.cache/deer/data.",
    )(command)


def seed_option(command):
    return click.option("--seed", default=0, show_default=True, help="Seed for the subset and the few-shot examples.")(command)


def kg_options(subset: bool = True):
    """--kg/--data-dir/--split/--seed (and --subset), shared by the KG probes and experiments."""

    def decorate(command):
        command = seed_option(command)
        if subset:
            command = click.option(
                "--subset", type=int, default=None,
                help="Sample N triples of the split (paper protocol: candidates = entities of those triples).",
            )(command)
        command = click.option("--split", type=click.Choice(["train", "valid", "test"]), default="test", show_default=True,
                               help="Split whose triples are the queries.")(command)
        command = data_dir_option(command)
        return click.option("--kg", default="wn18rr", show_default=True,
                            help="'wn18rr' or a folder with a KG in the TSV/JSONL format.")(command)

    return decorate


def template_options(command):
    """--k-shot/--shots/--query-trailing-space/--template-style, shared by the KG probes."""
    command = click.option(
        "--template-style", type=click.Choice(["paper", "authors"]), default="paper", show_default=True,
        help="Query text. paper: the paper's '(h, r, t)' example lines, then '(h, r,' (examples per query, "
             "seeded by seed, head and relation). authors: byte for byte the DEER authors' package deer-probe 0.1.1: "
             "one example set shared by all queries, then 'h - h_description' and '(h, r, ' (implies --shots shared "
             "and the trailing space; deer lama then refuses, its next token being read at the comma). "
             "The tail prompt is the same in both; BEAR scores ' t)' after the query text up to the comma.",
    )(command)
    command = click.option(
        "--query-trailing-space/--no-query-trailing-space", default=None,
        help="Paper style: end the DEER query with ', ' as the paper's text does (default: end at the comma, "
             "where BEAR/LAMA split the statement, so DEER and LAMA share one pass; see README). "
             "The authors' style always ends with ', '.",
    )(command)
    command = click.option(
        "--shots", type=click.Choice(["per-query", "shared"]), default=None,
        help="Resample the few-shot examples for every query (paper style's default) or use one set for all "
             "(the authors' style, which allows only this).",
    )(command)
    return click.option("--k-shot", default=8, show_default=True, help="Few-shot examples per query.")(command)


def out_option(help_text: str, default=None):
    return click.option("--out", "out_dir", type=click.Path(file_okay=False), default=default,
                        show_default=default is not None, help=help_text)


def token_budget_option(default: int, help_text: str = "Max padded tokens per forward batch."):
    return click.option("--token-budget", default=default, show_default=True, help=help_text)
