"""`deer bear` and `deer lama`: the reference likelihood probes (registered by deer.cli)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from deer.cli import (
    RUNS_DIR,
    output_folder,
    friendly_errors,
    kg_options,
    model_options,
    prepare_queries,
    print_metrics_table,
    template_options,
)
from deer.run_spec import run_folder_name


def _print_bear_dataset_summary(metrics: dict) -> None:
    overall = metrics["overall"]
    per_template = ", ".join(f"t{t}={a:.3f}" for t, a in overall["accuracy_per_template"].items())
    click.echo(
        f"BEAR score {overall['accuracy_mean']:.4f} (std over templates {overall['accuracy_std']:.4f}; {per_template}); "
        f"random baseline {overall['random_baseline']:.4f}; {overall['instances']} instances"
    )
    if metrics.get("convention"):
        click.echo(f"metric convention: {metrics['convention']['name']}")
    for title, key in (("domain", "per_domain"), ("cardinality", "per_cardinality")):
        click.echo(f"\n{title:<16}{'acc':>8}{'std':>8}{'random':>8}{'n':>7}")
        for name, block in metrics[key].items():
            click.echo(f"{name:<16}{block['accuracy_mean']:>8.3f}{block['accuracy_std']:>8.3f}{block['random_baseline']:>8.3f}{block['instances']:>7}")


@click.command()
@kg_options
@model_options
@template_options
@click.option("--dataset", default=None, help="Score a BEAR-format data set instead of a KG: 'bear', 'bear-big' or a folder.")
@click.option("--relations", default=None, help="Data set only: comma-separated relation codes, e.g. P19,P20.")
@click.option("--max-instances", type=int, default=None, help="Data set only: at most N instances per relation (seeded by --seed).")
@click.option("--pll-variant", type=click.Choice(["original", "within_word_l2r"]), default="within_word_l2r", show_default=True,
              help="Masked LMs: pseudo log-likelihood variant.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Output folder.")
@click.option("--token-budget", default=512, show_default=True, help="Tokens per forward pass: causal LMs pack this many candidate tokens after the shared query (KG) or trie nodes in one row (data set); masked LMs batch max(512, this) padded tokens.")
@click.option("--no-cache", is_flag=True, help="Do not read or write stored score rows (KG runs).")
@click.option("--domain-support", type=click.Choice(["divided", "full"]), default="divided", show_default=True,
              help="Data set only: a relation with k domains adds 1/k of its support to each (lm-pub-quiz 0.3.3) or all of it.")
@click.option("--ties", type=click.Choice(["first", "wrong"]), default="first", show_default=True,
              help="Data set only: a tie goes to the first answer in answer-space order (argmax, lm-pub-quiz 0.3.3) or counts as wrong.")
@click.option("--resummarise", is_flag=True,
              help="Data set only: recompute metrics.json/summary.md/metadata.json of the run in --out from its instances table "
                   "(no model, no scoring), e.g. under another --domain-support/--ties.")
@friendly_errors
def bear(kg, data_dir, split, subset, seed, model_name, dtype, device, k_shot, shots, query_trailing_space,
         dataset, relations, max_instances, pll_variant, out_dir, token_budget, no_cache, domain_support, ties, resummarise):
    """BEAR: rank candidates by the summed log-likelihood of each candidate statement.

    \b
    On a KG (default): statement = DEER query text + ' t_name)'; writes the ranks table
    (bear_rank_raw/filtered, bear_top10 beside other probes' columns), metrics.json, metadata.json.
    With --dataset bear|bear-big|FOLDER: the BEAR score (accuracy per template, mean and spread,
    per relation/domain/cardinality, random baseline); writes instances table, metrics.json, metadata.json.
    Both resume after an interruption.
    """
    from deer.probe import open_model

    started = time.perf_counter()
    if resummarise and not dataset:
        raise ValueError("--resummarise recomputes a data-set run: give --dataset (and its --out folder)")
    if dataset:
        from bear_ref.dataset import resummarise_bear_dataset, run_bear_dataset
        from kg_data.bear import load_bear_dataset

        codes = [c.strip() for c in relations.split(",") if c.strip()] if relations else None
        data = load_bear_dataset(dataset, data_dir, relations=codes, max_instances=max_instances, seed=seed)
        click.echo(f"{data.name}: {len(data.relations)} relations, {data.n_instances} instances, {data.n_statements} statements")
        out = Path(out_dir) if out_dir else RUNS_DIR / run_folder_name(
            data.name + (f"-{'+'.join(codes)}" if codes else ""), model_name, split="dataset", subset=max_instances)
        if resummarise:
            metrics, _ = resummarise_bear_dataset(out, data, domain_support=domain_support, ties=ties)
            click.echo("")
            _print_bear_dataset_summary(metrics)
            click.echo(f"\nrecomputed from the instances table: {out}")
            return
        loaded = open_model(model_name, dtype=dtype, device=device)
        selection = {"relations": codes, "max_instances": max_instances, "seed": seed}
        metrics, metadata = run_bear_dataset(data, loaded, out, selection, token_budget=token_budget, pll_variant=pll_variant,
                                             domain_support=domain_support, ties=ties)
        click.echo("")
        _print_bear_dataset_summary(metrics)
    else:
        from bear_ref.kg_probe import run_bear_probe

        _, queries, templates = prepare_queries(kg, data_dir, split, subset, seed, k_shot, shots, query_trailing_space)
        click.echo(f"= {len(queries) * len(queries.candidates)} statements")
        loaded = open_model(model_name, dtype=dtype, device=device)
        out = output_folder(out_dir, queries, loaded, templates, model_name)
        metrics, metadata = run_bear_probe(queries, loaded, templates, out, token_budget=token_budget, pll_variant=pll_variant,
                                           use_cache=not no_cache)
        click.echo("")
        print_metrics_table({"bear": metrics})
    work = metadata["work"]
    click.echo(f"\n{work.get('tokens', 0)} tokens through the model; total {time.perf_counter() - started:.1f}s")
    click.echo(f"results: {out}")


@click.command()
@kg_options
@model_options
@template_options
@click.option("--single-token", is_flag=True, help="Keep only candidates (and gold tails) whose name is one token, as LAMA does.")
@click.option("--with-deer", is_flag=True, help="Also run DEER, reusing the same query forward pass.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Output folder.")
@click.option("--token-budget", default=8192, show_default=True, help="Max padded tokens per forward batch.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the embedding cache (DEER).")
@friendly_errors
def lama(kg, data_dir, split, subset, seed, model_name, dtype, device, k_shot, shots, query_trailing_space,
         single_token, with_deer, out_dir, token_budget, no_cache):
    """LAMA: rank candidates by log p(first token of the tail) right after the query text.

    Writes the ranks table (lama_* columns, and deer_* with --with-deer), metrics.json, metadata.json.
    """
    from bear_ref.lama import run_lama_probe
    from deer.probe import open_model

    started = time.perf_counter()
    _, queries, templates = prepare_queries(kg, data_dir, split, subset, seed, k_shot, shots, query_trailing_space)
    loaded = open_model(model_name, dtype=dtype, device=device)
    # --single-token ranks fewer queries, so its spec (checked when writing) is not the one built here.
    out = output_folder(out_dir, queries, loaded, templates, model_name, suffix="-single-token" if single_token else "",
                        check=not single_token)
    results = run_lama_probe(queries, loaded, templates, out, single_token=single_token, with_deer=with_deer,
                             token_budget=token_budget, use_cache=not no_cache)
    click.echo("")
    print_metrics_table(results)
    click.echo(f"\ntotal {time.perf_counter() - started:.1f}s\nresults: {out}")
