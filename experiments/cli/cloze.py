"""`deer cloze`: DEER, LAMA and BEAR on BEAR's and LAMA's own benchmarks (``experiments.benchmarks``); `deer experiment
agreement|screen --kg lama|bear|bear-big` run the same (``run_benchmark_of``)."""

from __future__ import annotations

import click

from deer.backends import DEFAULT_BACKEND, cache_unless
from deer.platform.tables import text_table
from experiments.cli.options import (
    OneValueCommand,
    backend_option,
    data_dir_option,
    friendly_errors,
    model_options,
    models_or_default,
    refuse_options_the_benchmarks_ignore,
    token_budget_option,
)


def is_benchmark(kg: str) -> bool:
    """True for a cloze benchmark (LAMA, BEAR) rather than a KG: a name, or a folder in their layout."""
    from kg_data.load import dataset_kind

    return dataset_kind(kg) != "kg"


def comma_list(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


def run_benchmark_command(kg, model_names, probes, out_dir, **options) -> None:
    """One model: ``probe_benchmark``; several: ``compare_models`` (orderings).  Prints where results went."""
    from experiments.benchmarks import compare_models, probe_benchmark

    out_dir = out_dir or f"results/{str(kg).lower().replace('/', '_')}-{'-'.join(probes)}"
    if len(model_names) > 1:
        compare_models(kg, model_names, out_dir, probes=probes, **options)
        click.echo(f"wrote {out_dir}/orderings.md and one folder per model")
        return
    report = probe_benchmark(kg, model_names[0], probes=probes, out=out_dir, **options)
    echo_headline(report["metrics"])
    click.echo(f"{len(report['table'])} queries; wrote {out_dir}/summary.md (P@1 / P@10 / MRR per source, agreement tables)")
    if "bear_dataset" in report:
        click.echo(f"DEER vs BEAR on the data set: {out_dir}/bear_dataset/summary.md")


def run_benchmark_of(given: dict, model_names, probes, out_dir, honoured=(), **options) -> None:
    """``run_benchmark_command`` from the KG options of `deer probe|bear|lama|experiment` (--subset: facts per relation);
    any other option given is refused by name (``honoured``: the command's own that this path reads)."""
    refuse_options_the_benchmarks_ignore(given["kg"], honoured)
    run_benchmark_command(given["kg"], models_or_default(model_names), probes, out_dir, data_dir=given["data_dir"],
                          dtype=given["dtype"], device=given["device"], max_facts=given["subset"], seed=given["seed"],
                          token_budget=given["token_budget"],
                          cache=cache_unless(given["no_cache"], options.get("backend", DEFAULT_BACKEND)), **options)


def echo_headline(metrics: dict) -> None:
    """The headline numbers: P@1, P@10 and MRR per candidate set, mode and probe, pooled over queries."""
    from experiments.cloze_report import cloze_blocks

    rows = [{**block["overall"], "kind": kind, "mode": mode, "probe": probe} for kind, mode, probe, block in cloze_blocks(metrics)
            if block["overall"]["n"]]
    columns = (("candidates", "<14", "kind"), ("mode", "<15"), ("probe", "<7"), ("n", ">6"), ("P@1", ">8.3f"), ("P@10", ">8.3f"),
               ("MRR", ">8.4f"), ("random P@1", ">12.4f", "random_p@1"))
    click.echo("\n" + text_table(rows, columns) + "\n")


@click.command(cls=OneValueCommand)
@click.option("--dataset", "kg", default="lama", show_default=True,
              help="'lama', 'bear', 'bear-big', or a folder in the LAMA layout (relations.jsonl) or lm-pub-quiz's (BEAR).")
@data_dir_option
@model_options(multiple=True)
@click.option("--probes", default="deer,lama,bear", show_default=True, help="Registered probes that score a benchmark (deer probes lists them).")
@click.option("--modes", default="template,template-free", show_default=True,
              help="LAMA: template (the relation's template) and/or template-free (the fact's first masked evidence sentence).")
@click.option("--candidates", "candidate_kinds", default="common-vocab,relation", show_default=True,
              help="LAMA: rank over the common vocabulary's single-token words and/or the relation's objects. "
                   "BEAR and statement-scored LAMA queries run on the relation's objects only.")
@click.option("--sources", default=None, help="LAMA: some of TREx, Google_RE, Squad (default: all present).")
@click.option("--relations", default=None, help="Relation codes to keep, comma-separated (P19, place_of_birth, squad; BEAR: P6,...).")
@click.option("--max-facts", type=click.IntRange(min=1), default=None,
              help="At most N facts (LAMA) or instances (BEAR) per relation, sampled with --seed.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of --max-facts and the bootstrap.")
@click.option("--bear-run", type=click.Path(file_okay=False, exists=True), default=None,
              help="BEAR data set: a finished `deer bear-dataset` folder of the same model and data to take BEAR's ranks "
                   "from (checked), instead of scoring every statement again.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples for the log-rank r intervals.")
@token_budget_option(None)
@backend_option
@click.option("--no-cache", is_flag=True,
              help="Do not read or write the prompt store (DEER's candidate vectors: LAMA's vocabulary, the answers), "
                   "which is otherwise kept per model and reused by every later run.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (default results/<dataset>-<probes>); a stopped run resumes from it.")
@friendly_errors
def cloze(kg, model_names, probes, bear_run, bootstrap, token_budget, backend, no_cache, out_dir, **given):
    """Probe on LAMA or the BEAR data set with DEER, LAMA and BEAR side by side.

    \b
    LAMA (LAMA's protocol): facts whose object is one token for the model; P@1, P@10 and MRR per
    relation and source, template-based and template-free (the evidence sentence cut at the mask
    for causal LMs; DEER embeds the cut sentence).  Per-fact agreement between the probes and
    between a fact's template-based and template-free ranks.
    BEAR data set: DEER's accuracy per template, domain and cardinality beside BEAR's score, and
    the per-instance agreement (bear_dataset/summary.md).
    Several --model: one folder per model and orderings.md (the models ordered by each probe).
    Python: experiments.benchmarks.probe_benchmark / compare_models.
    """
    from bear_ref.benchmark import BenchmarkSelection
    from deer.platform.run_options import Budget, ModelLoading
    from deer.probes import probe_names

    probe_list, known = comma_list(probes), probe_names()
    if not probe_list or any(p not in known for p in probe_list):
        raise click.BadParameter(f"choose from {', '.join(known)}", param_hint="--probes")
    selection = BenchmarkSelection(given["data_dir"], comma_list(given["relations"]), comma_list(given["sources"]), given["max_facts"],
                                   given["seed"], comma_list(given["modes"]), comma_list(given["candidate_kinds"]))
    run_benchmark_command(kg, models_or_default(model_names), probe_list, out_dir, selection=selection,
                          loading=ModelLoading(given["dtype"], given["device"]), budget=Budget(token_budget), bear_run=bear_run,
                          bootstrap=bootstrap, backend=backend, cache=cache_unless(no_cache, backend))
