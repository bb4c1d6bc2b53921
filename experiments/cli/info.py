"""`deer models` and `deer data` (with `deer data fetch`): what is installed and found, and getting data."""

from __future__ import annotations

import json

import click

from experiments.cli.options import OneValueCommand, OneValueGroup, friendly_errors


@click.command(cls=OneValueCommand)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def models(as_json):
    """List model aliases, what they point to, and whether they are installed here."""
    from deer.backends.models import describe_models

    rows = describe_models()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['alias']:<22}{'yes' if row['installed'] else 'no':<5}{row['source']:<15}{row['model']}")
        if not row["installed"]:
            click.echo(f"{'':<27}install: {row['install']}")


@click.command(cls=OneValueCommand)
def probes():
    """List the registered probes (this toolkit's and other packages' `deer.probes` entry points) with their options."""
    from deer.probes import get_probe, option_values, probe_names

    for name in probe_names():
        probe = get_probe(name)
        options = ", ".join(f"{key}={value!r} ({option_values(probe, key).describe()})" for key, value in probe.options.items())
        click.echo(f"{name:<12}{probe.summary}\n{'':<12}options: {options or 'none'}")


@click.command(cls=OneValueCommand)
def backends():
    """List the model backends (`--backend`): hf, plain, and any another package registered."""
    from deer.backends import backend_class, backend_names

    for name in backend_names():
        lines = (backend_class(name).__doc__ or "").strip().splitlines()  # a backend from elsewhere may have no docstring
        click.echo(f"{name:<8}{lines[0] if lines else '(no description)'}")


@click.group(cls=OneValueGroup, invoke_without_command=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Folder holding the data sets (the only one searched when given).")
@click.pass_context
def data(ctx, data_dir):
    """Show which data sets were found and where; `deer data fetch NAME` downloads one."""
    if ctx.invoked_subcommand is not None:
        return
    from kg_data import describe_datasets, load_kg
    from kg_data.locate import MANUAL_DATASETS, candidate_data_dirs

    rows = describe_datasets(data_dir)
    for row in rows:
        if row["usable"]:
            click.echo(f"{row['name']:<9} found    {row['path']}")
        elif row["found"]:
            click.echo(f"{row['name']:<9} unusable {row['path']} ({row['note']})")
        else:
            how = "`deer data fetch " + row["name"] + "` says where to get it" if row["name"] in MANUAL_DATASETS else f"deer data fetch {row['name']}"
            click.echo(f"{row['name']:<9} missing  ({how})")
    if any(r["name"] == "wn18rr" and r["found"] for r in rows):
        summary = load_kg("wn18rr", data_dir).summary()
        click.echo(f"\nwn18rr: {summary['entities']} entities, {summary['relations']} relations, "
                   f"train/valid/test {summary['train_triples']}/{summary['valid_triples']}/{summary['test_triples']}")
    click.echo("\nsearched: " + ", ".join(str(p) for p in candidate_data_dirs(data_dir)))


@data.command("fetch")
@click.argument("names", nargs=-1, required=True, type=click.Choice(["wn18rr", "bear", "bear-big", "lama", "wikidata5m"]))
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Data root to fetch into (default $DEER_DATA_DIR, else $DEER_CACHE_DIR/data, ~/.cache/deer/data).")
@click.option("--base-url", default=None, help="A mirror laid out like the data root (default: each data set's "
                                               "upstream repository at its pinned commit; or $DEER_DATA_BASE_URL).")
@click.option("--offline", is_flag=True, help="Never download: only check what is there and say what is missing.")
@click.pass_context
@friendly_errors
def fetch(ctx, names, data_dir, base_url, offline):
    """Download data sets from their public originals (pinned commits), verify sha256, install atomically.

    Python: kg_data.fetch.fetch_dataset(name).  Files already present and correct are kept.
    """
    from kg_data.fetch import fetch_dataset

    data_dir = data_dir or ctx.parent.params["data_dir"]  # `deer data --data-dir X fetch NAME` too

    for name in names:
        folder = fetch_dataset(name, data_dir=data_dir, base_url=base_url, offline=offline or None)
        click.echo(f"{name:<10}ready    {folder}")
