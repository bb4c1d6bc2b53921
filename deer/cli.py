"""The `deer` command: probe a language model's knowledge of a textual KG.

Subcommands: probe (DEER), models, data; bear/lama (reference probes, bear_ref) and
experiment (experiments) are registered from their packages.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

import click

from deer.models import DEFAULT_MODEL


class UserFacingError(click.ClickException):
    """Printed as 'Error: ...' with exit code 1, never as a traceback."""


def debug_requested() -> bool:
    """`deer --debug ...` or DEER_DEBUG=1: show tracebacks instead of one-line messages."""
    import os

    ctx = click.get_current_context(silent=True)
    from_cli = bool(ctx is not None and ctx.find_root().meta.get("deer.debug"))
    return from_cli or os.environ.get("DEER_DEBUG", "") not in ("", "0")


def friendly_errors(command):
    """Turn the errors a user can cause (missing model/data, bad files) into clear messages."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from deer.cache import CacheKeyMismatch
        from deer.models import ModelUnavailableError
        from kg_data.errors import KGFormatError, KGNotFoundError

        try:
            return command(*args, **kwargs)
        except (ModelUnavailableError, KGFormatError, KGNotFoundError, CacheKeyMismatch, ValueError) as error:
            if debug_requested():
                raise  # the whole traceback: an internal ValueError is a bug, not bad input
            raise UserFacingError(f"{error}\n(run with `deer --debug ...` or DEER_DEBUG=1 for the traceback)") from None

    return wrapper


def model_options(command):
    """--model/--dtype/--device, shared by every command that loads a model."""
    command = click.option("--device", default="auto", show_default=True,
                           help="torch device: auto (cuda:0 when torch sees a GPU, else cpu), cpu, cuda:0, ...")(command)
    command = click.option(
        "--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True,
        help="Weights and activations dtype.",
    )(command)
    command = click.option(
        "--model", "model_name", default=DEFAULT_MODEL, show_default=True,
        help="Alias (see `deer models`), hub id (facebook/opt-1.3b) or local folder.",
    )(command)
    return command


def kg_options(command):
    """--kg/--data-dir/--split/--subset/--seed, shared by the KG probes."""
    command = click.option("--seed", default=0, show_default=True, help="Seed for the subset and the few-shot examples.")(command)
    command = click.option(
        "--subset", type=int, default=None,
        help="Sample N triples of the split (paper protocol: candidates = entities of those triples).",
    )(command)
    command = click.option("--split", type=click.Choice(["train", "valid", "test"]), default="test", show_default=True)(command)
    command = click.option(
        "--data-dir", type=click.Path(file_okay=False), default=None,
        help="Folder holding the data sets (wn18rr/, bear/, ...); default: $DEER_DATA_DIR or ../shared/data.",
    )(command)
    command = click.option(
        "--kg", default="wn18rr", show_default=True, help="'wn18rr' or a folder with a KG in the TSV/JSONL format."
    )(command)
    return command


TEMPLATE_STYLE_KEY = "deer.template_style"


def _remember_template_style(ctx, param, value):
    ctx.meta[TEMPLATE_STYLE_KEY] = value
    return value


def current_template_style(default: str = "paper") -> str:
    """The --template-style of the running command (``default`` outside one)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(TEMPLATE_STYLE_KEY, default) if ctx is not None else default


def template_options(command):
    """--k-shot/--shots/--query-trailing-space/--template-style, shared by the KG probes.

    --template-style is not passed to the command as an argument: ``prepare_queries`` (and
    ``current_template_style()``) read it from the click context, so commands keep their signature.
    """
    command = click.option(
        "--template-style", type=click.Choice(["paper", "authors"]), default="paper", show_default=True,
        expose_value=False, callback=_remember_template_style,
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
    command = click.option("--k-shot", default=8, show_default=True, help="Few-shot examples per query.")(command)
    return command


def prepare_queries(kg, data_dir, split, subset, seed, k_shot, shots, query_trailing_space, template_style=None):
    """Load the KG and build (knowledge graph, queries, templates) from the shared options; say what will run.

    ``template_style`` None: the running command's --template-style (paper outside a command).
    """
    from deer.templates import PromptTemplates
    from kg_data import build_queries, load_kg

    templates = PromptTemplates(k_shot=k_shot, shots=shots, seed=seed, query_trailing_space=query_trailing_space,
                                style=template_style or current_template_style())
    knowledge_graph = load_kg(kg, data_dir)
    queries = build_queries(knowledge_graph, split, subset, seed)
    click.echo(f"KG {knowledge_graph.name}: {len(queries)} {split} queries x {len(queries.candidates)} candidates")
    return knowledge_graph, queries, templates


RUNS_DIR = Path("runs")


def output_folder(out_dir, queries, loaded, templates, model_name: str, suffix: str = "", check: bool = True) -> Path:
    """``--out``, or by default runs/KG-SPLIT-SUBSET|all-MODEL-DIGEST[SUFFIX], named by the run's spec
    (``deer.run_spec.run_folder_name``).  With ``check``, a folder holding another spec is refused
    now, before any work (the final write would refuse it anyway)."""
    from deer.run_spec import RunSpec, spec_folder

    spec = RunSpec.build(queries, loaded, templates)
    return spec_folder(out_dir, RUNS_DIR, queries.kg.name, model_name, spec, suffix, check)


def print_metrics_table(metrics_by_probe: dict) -> None:
    """Short summary: Hit@1/10/100, MRR, MR raw and filtered, with the random baseline."""
    header = f"{'probe':<10}{'setting':<10}{'n':>6}{'Hit@1':>8}{'Hit@10':>8}{'Hit@100':>9}{'MRR':>8}{'MR':>10}"
    click.echo(header)
    click.echo("-" * len(header))
    for probe, metrics in metrics_by_probe.items():
        rows = [(probe, "raw", metrics["raw"]), (probe, "filtered", metrics["filtered"]),
                ("random", "filtered", metrics["random_baseline"]["filtered"])]
        for name, setting, m in rows:
            click.echo(
                f"{name:<10}{setting:<10}{m['n']:>6}{m['hit@1']:>8.3f}{m['hit@10']:>8.3f}{m['hit@100']:>9.3f}"
                f"{m['mrr']:>8.4f}{m['mr']:>10.1f}"
            )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="deer-probe-toolkit", prog_name="deer")
@click.option("--debug", is_flag=True, help="Show the traceback of an error instead of a one-line message (or DEER_DEBUG=1).")
@click.pass_context
def main(ctx, debug):
    """Probe what a language model knows about a knowledge graph.

    \b
    deer probe   DEER: PromptEOL embeddings of queries and described tails, cosine ranking
    deer bear    BEAR reference probe (summed log-likelihood of every candidate statement)
    deer lama    LAMA reference probe (log-probability of the tail's first token)
    deer experiment NAME   compute-time, token-bias, agreement, screen
    deer models  which models are known and installed
    deer data    which data sets were found, and where
    """
    ctx.meta["deer.debug"] = debug


@main.command()
@kg_options
@model_options
@template_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (default runs/KG-SPLIT-SUBSET-MODEL-DIGEST, DIGEST naming the other settings).")
@click.option("--token-budget", default=8192, show_default=True, help="Max padded tokens per forward batch.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the embedding cache.")
@friendly_errors
def probe(kg, data_dir, split, subset, seed, model_name, dtype, device, k_shot, shots, query_trailing_space,
          out_dir, token_budget, no_cache):
    """Run the DEER probe: rank every candidate tail for each (h, r, ?) query.

    Writes ranks.parquet (per query: gold rank raw/filtered, tail token length, top-10),
    metrics.json (Hit@1/3/10/100, MRR, MR overall and per relation, random baseline) and
    metadata.json (model, templates, seeds, versions, timings, tokens) to --out.
    Entity embeddings are cached and reused by later runs.
    """
    from deer.probe import open_model, run_deer_probe

    started = time.perf_counter()
    _, queries, templates = prepare_queries(kg, data_dir, split, subset, seed, k_shot, shots, query_trailing_space)
    loaded = open_model(model_name, dtype=dtype, device=device)
    out = output_folder(out_dir, queries, loaded, templates, model_name)
    run = run_deer_probe(queries, loaded, templates, out, token_budget=token_budget, use_cache=not no_cache)
    click.echo("")
    print_metrics_table({"deer": run.metrics})
    work = run.metadata["work"]
    cache = run.metadata["cache"]
    click.echo(
        f"\nencoded {cache['entities_encoded_now']} entities + {cache['queries_encoded_now']} queries "
        f"({cache['entities_from_cache']} entities, {cache['queries_from_cache']} queries from cache); "
        f"{work['tokens']} tokens at {work['tokens_per_second'] or 0:.0f} tokens/s; "
        f"total {time.perf_counter() - started:.1f}s"
    )
    click.echo(f"results: {out}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def models(as_json):
    """List model aliases, what they point to, and whether they are installed here."""
    from deer.models import describe_models

    rows = describe_models()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        mark = "yes" if row["installed"] else "no"
        click.echo(f"{row['alias']:<22}{mark:<5}{row['source']:<15}{row['model']}")
        if not row["installed"]:
            click.echo(f"{'':<27}install: {row['install']}")


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Extra folder to search first.")
def data(data_dir):
    """Show which data sets were found and where; for WN18RR also its size."""
    from kg_data import describe_datasets, load_kg
    from kg_data.locate import candidate_data_dirs

    for row in describe_datasets(data_dir):
        if row["usable"]:
            click.echo(f"{row['name']:<10}found    {row['path']}")
        elif row["found"]:
            click.echo(f"{row['name']:<10}unusable {row['path']} ({row['note']})")
        else:
            click.echo(f"{row['name']:<10}missing")
    wn18rr = [r for r in describe_datasets(data_dir) if r["name"] == "wn18rr" and r["found"]]
    if wn18rr:
        summary = load_kg("wn18rr", data_dir).summary()
        click.echo(
            f"\nwn18rr: {summary['entities']} entities, {summary['relations']} relations, "
            f"train/valid/test {summary['train_triples']}/{summary['valid_triples']}/{summary['test_triples']}"
        )
    click.echo("\nsearched: " + ", ".join(str(p) for p in candidate_data_dirs(data_dir)))


def _register_optional_commands() -> None:
    """bear/lama and experiment live in their own packages; register them when present."""
    try:
        from bear_ref.cli import bear, lama

        main.add_command(bear)
        main.add_command(lama)
    except ImportError as error:
        if "bear_ref.cli" not in str(error):
            raise
    try:
        from experiments.cli import experiment

        main.add_command(experiment)
    except ImportError as error:
        if "experiments.cli" not in str(error):
            raise


_register_optional_commands()

if __name__ == "__main__":
    sys.exit(main())
