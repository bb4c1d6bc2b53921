"""`deer probe` and `deer bear-dataset`: thin shells over the Python API (``deer.runner.run_kg``, which
``deer.probe``, ``bear_ref.bear`` and ``bear_ref.lama`` run with one probe; ``bear_ref.bear_dataset``)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import click

from deer.backends import cache_unless
from deer.base.errors import OptionError
from deer.platform.tables import format_number, text_table
from experiments.cli.cloze import comma_list, is_benchmark
from experiments.cli.options import (
    OneValueCommand,
    backend_option,
    data_dir_option,
    friendly_errors,
    kg_run_options,
    model_options,
    out_option,
    parse_key_values,
    refuse_given,
    run_options_of,
    seed_option,
    token_budget_option,
)

RUNS_DIR = Path("runs")
KG_OUT_HELP = "Output folder (default runs/KG-SPLIT-SUBSET-MODEL-DIGEST, DIGEST naming the other settings)."
QUERY_OPTIONS = ("kg", "data_dir", "split", "subset", "seed", "k_shot", "shots", "shot_seed", "query_trailing_space", "template_style")
# How a model is loaded and run: dropped silently where no model runs (--resummarise, --run), so refused there by name.
MODEL_RUN_OPTIONS = {"model_args", "adapter", "dtype", "device", "backend", "token_budget", "pll_variant", "no_cache"}


def prepare_queries(kg, options, *, model_names=(), out_dir=None, out_name="out"):
    """(queries, templates) of a KG, after checking the options, the output folder and the models (no model loads)."""
    from deer.platform.inputs import as_query_set, check_inputs

    selection, budget, loading = options.selection, options.budget, options.loading
    for model_name in model_names or (None,):
        check_inputs(model_name, out=out_dir or RUNS_DIR, subset=selection.subset, seed=selection.seed,
                     k_shot=options.templates.k_shot, token_budget=budget.token_budget, dtype=loading.dtype,
                     device=loading.device, long_prompts=budget.long_prompts, out_option=out_name)
    queries = as_query_set(kg, selection.split, selection.subset, selection.seed, selection.data_dir, selection.exclude_head)
    click.echo(f"KG {queries.kg.name}: {len(queries)} {selection.split} queries x {len(queries.candidates)} candidates")
    return queries, options.templates


def print_metrics_table(result) -> None:
    """Hit@1/10/100, MRR and MR per probe, raw and filtered, with the random baseline and the chance-adjusted index."""
    rows = []
    for probe in result.probes:
        metrics = result.probe_metrics[probe]
        rows += [{**metrics["raw"], "probe": probe, "setting": "raw"},
                 {**metrics["filtered"], "probe": probe, "setting": "filtered"},
                 {**metrics["random_baseline"]["filtered"], "probe": "random", "setting": "filtered"}]
        if "adjusted_index" in metrics:
            adjusted = {"n": metrics["filtered"]["n"], **metrics["adjusted_index"]["filtered"]}
            rows.append({**adjusted, "probe": "adjusted", "setting": "filtered"})
    header, _, body = text_table(rows, METRIC_COLUMNS).partition("\n")
    click.echo(f"\n{header}\n{'-' * len(header)}\n{body}")
    click.echo("adjusted: chance-adjusted index (PyKEEN's), 0 = random ranking, 1 = perfect; for MR it is AMRI. "
               "A tie at the cut-off counts as a miss for Hit@k (rank 1.5 is no Hit@1).")


def _mr_text(row):
    return None if row["mr"] is None else format(row["mr"], ".3f" if row["probe"] == "adjusted" else ".1f")


METRIC_COLUMNS = (("probe", "<10"), ("setting", "<10"), ("n", ">6"), ("Hit@1", ">8.3f"), ("Hit@10", ">8.3f"),
                  ("Hit@100", ">9.3f"), ("MRR", ">8.4f"), ("MR", ">10", _mr_text))


@contextlib.contextmanager
def spelled_as_probe_option():
    """An OptionError about a probe's own option names it as the command line gave it: --probe-option KEY=VALUE."""
    try:
        yield
    except OptionError as error:
        raise OptionError("probe_option", f"{error.option}={error.value}", error.problem) from None


def open_kg_run(g: dict, options: dict, run_options, guard: bool = False):
    """(queries, the KG as the length guard leaves it, templates, the opened backend, out) from the command's options ``g``, the
    probes' ``options`` checked before the model opens.  ``out``: --out or the run spec's folder, with a probe's
    ``folder_suffix`` (LAMA's single-token ranks fewer queries: a folder of its own).  ``guard``: every text checked now
    in --long-prompts error mode too (before Ray's workers)."""
    from deer.backends import open_backend
    from deer.platform.inputs import fitted_queries
    from deer.platform.run_spec import RunSpec, spec_folder
    from deer.probes import check_probe_inputs, get_probe

    queries, templates = prepare_queries(g["kg"], run_options, model_names=[g["model_name"]], out_dir=g["out_dir"])
    suffixes, probes = [], [get_probe(name) for name in options]
    for name, probe in zip(options, probes, strict=True):
        own = {**probe.options, **options[name]}
        with spelled_as_probe_option():
            check_probe_inputs(probe, own, queries, templates)
        folder_suffix = getattr(probe, "folder_suffix", None)
        suffixes.append(folder_suffix(own) if folder_suffix is not None else "")
    suffix = "".join(dict.fromkeys(suffixes))  # a probe that ranks fewer queries than given: checked when saving
    runner = open_backend(g["backend"], g["model_name"], dtype=g["dtype"], device=g["device"],  # once, also for stores and Ray
                          token_budget=g["token_budget"])
    fitted = fitted_queries(queries, probes, runner, templates, run_options.budget.long_prompts, guard)
    spec = RunSpec.build(fitted, runner.loaded, templates)  # what the run records: the KG as the guard leaves it
    out = spec_folder(g["out_dir"], RUNS_DIR, queries.kg.name, g["model_name"], spec, suffix, not suffix)
    return queries, fitted.kg, templates, runner, out


def options_by_probe(probes, pairs: dict) -> dict:
    """--probe-option's pairs, each given to every chosen probe that has it (checked); one no probe has is refused."""
    from deer.runner import probe_options

    with spelled_as_probe_option():
        if len(probes) == 1:  # its own message: the probe's options
            return {probes[0].name: probe_options(probes[0], pairs)}
        unowned = [key for key in pairs if not any(key in probe.options for probe in probes)]
        if unowned:
            owned = "; ".join(f"{probe.name}: {', '.join(probe.options) or 'none'}" for probe in probes)
            raise OptionError(unowned[0], pairs[unowned[0]], f"no probe of this run has such an option ({owned})")
        return {probe.name: probe_options(probe, {k: v for k, v in pairs.items() if k in probe.options}) for probe in probes}


def run_kg_command(g: dict, options: dict, *, ray_workers=None, ray_address=None) -> None:
    """`deer probe`: the probes of ``options`` on one KG, then their metrics."""
    from deer.runner import run_kg

    started = time.perf_counter()
    if is_benchmark(g["kg"]):  # LAMA or a BEAR-format data set: `deer cloze`'s job (0.1 ran it from here)
        raise click.UsageError(f"--kg {g['kg']} is a cloze benchmark, not a KG: type `deer cloze --dataset {g['kg']} "
                               f"--probes {','.join(options)}` (--subset is its --max-facts)")
    run_options = run_options_of(g)
    queries, fitted_kg, templates, runner, out = open_kg_run(g, options, run_options, guard=bool(ray_workers))
    if ray_workers:
        from experiments.ray_runs import encode_entities_on_ray

        # The KG as open_kg_run's guard left it: nothing too long reaches a worker.
        store = encode_entities_on_ray(fitted_kg, g["model_name"], templates, workers=ray_workers,
                                       entities=queries.candidates.tolist(), loading=run_options.loading,
                                       token_budget=g["token_budget"], address=ray_address, loaded=runner, backend=g["backend"])
        click.echo(f"entities encoded by {ray_workers} Ray workers into {store}")
    run = run_kg(list(options), queries, runner, options=options, templates=templates, budget=run_options.budget,
                 cache=cache_unless(g["no_cache"], g["backend"]), out=out)
    ranked = run.metadata_of(run.probes[0])
    if (ranked["queries"], ranked["candidates"]) != (len(queries), len(queries.candidates)):  # LAMA's single_token keeps fewer
        click.echo(f"ranked {ranked['queries']} of those queries x {ranked['candidates']} candidates (single-token names); "
                   "every number below is of these")
    print_metrics_table(run)
    for result in (run[probe] for probe in run.probes):
        cache = result.metadata.get("cache", {})
        if "entities_encoded_now" in cache:  # DEER's encoding, in a line
            work, handed = result.metadata["work"], cache.get("query_embeddings_given")
            click.echo(f"\nencoded {cache['entities_encoded_now']} entities + {cache['queries_encoded_now']} queries "
                       f"({cache['entities_from_cache']} entities, {cache['queries_from_cache']} queries from cache"
                       f"{f'; {len(result.table)} query vectors handed on by another probe' if handed else ''}); "
                       f"{work['tokens']} tokens at {work['tokens_per_second'] or 0:.0f} tokens/s")
        elif "tokens" in result.metadata.get("work", {}):
            click.echo(f"\n{result.probe}: {result.metadata['work']['tokens']} tokens through the model")
    click.echo(f"total {time.perf_counter() - started:.1f}s\nresults: {out}")


@click.command(cls=OneValueCommand)
@kg_run_options()
@click.option("--probe", "probe_name", default="deer", show_default=True,
              help="Which registered probes run, comma-separated: deer, bear, lama, or one another package registered "
                   "(`deer probes` lists them); several (lama,deer) run on one model load into one ranks table.")
@click.option("--probe-option", "probe_option_pairs", multiple=True, metavar="KEY=VALUE",
              help="An option of the probes, repeatable, given to each probe that has it (e.g. single_token=true for lama; "
                   "values read as --model-arg's); `deer probes` lists each probe's options and the values they take, "
                   "any other is refused.")
@backend_option
@out_option(KG_OUT_HELP)
@token_budget_option(None)
@click.option("--no-cache", is_flag=True, help="Do not read or write the embedding cache.")
@click.option("--long-prompts", type=click.Choice(["error", "truncate-descriptions"]), default="error", show_default=True,
              help="A prompt longer than the model's positions: stop with an error naming the entity or query, or cut "
                   "entity descriptions to fit (each cut is listed in metadata.json under length_guard).")
@click.option("--ray-workers", type=click.IntRange(min=1), default=None,
              help="Encode the candidate entities split over N Ray workers into the embedding cache first (pip install .[ray]).")
@click.option("--ray-address", default=None, help="A running Ray cluster for --ray-workers (default: a local one).")
@friendly_errors
def probe(probe_name, probe_option_pairs, ray_workers, ray_address, **given):
    """Run probes (DEER by default) on a KG: rank every candidate tail for each (h, r, ?) query.

    Writes ranks.parquet (per query: gold rank raw/filtered, tail token length, top-10 of every probe),
    metrics.json (Hit@1/3/10/100, MRR, MR overall and per relation, random baseline) and
    metadata.json (model, templates, seeds, versions, timings, tokens) to --out.
    Several probes (--probe lama,deer) run on one model load and rank the same queries; LAMA's
    pass hands DEER its query vectors.  Embeddings and score rows are cached and reused by later runs.
    Python: deer.probe(...), deer.runner.run_probe(NAME, ...), or deer.runner.run_kg([NAMES], ...).
    """
    from deer.probes import get_probe

    try:
        chosen = [get_probe(name) for name in dict.fromkeys(comma_list(probe_name) or [])]
    except KeyError as error:
        raise click.BadParameter(error.args[0], param_hint="--probe") from None
    if not chosen:
        raise click.BadParameter("name at least one probe", param_hint="--probe")
    options = options_by_probe(chosen, parse_key_values(probe_option_pairs, "--probe-option"))
    if ray_workers and (given["no_cache"] or "deer" not in options):
        raise click.UsageError("--ray-workers fills DEER's embedding cache: it needs --probe deer and no --no-cache")
    if ray_address and not ray_workers:  # read only by the workers: without them the run was local, the address dropped
        raise click.UsageError("--ray-address is the cluster of --ray-workers: give --ray-workers N too, or leave it out")
    if ray_address:
        from experiments.ray_runs import check_ray_address

        check_ray_address(ray_address)  # before the model loads: Ray itself finds a bad one only in the workers' start
    run_kg_command(given, options, ray_workers=ray_workers, ray_address=ray_address)


PLL_OPTION = click.option("--pll-variant", type=click.Choice(["original", "within_word_l2r"]), default="within_word_l2r",
                          show_default=True, help="Masked LMs: pseudo log-likelihood variant.")


def _print_bear_dataset_summary(metrics: dict) -> None:
    overall = metrics["overall"]
    per_template = ", ".join(f"t{t}={a:.3f}" for t, a in overall["accuracy_per_template"].items())
    click.echo(f"\nBEAR score {overall['accuracy_mean']:.4f} (std over templates {overall['accuracy_std']:.4f}; {per_template}); "
               f"random baseline {overall['random_baseline']:.4f}, chance-adjusted score "
               f"{format_number(overall['accuracy_mean_adjusted'], '.4f')}; {overall['instances']} instances")
    if metrics.get("convention"):
        click.echo(f"metric convention: {metrics['convention']['name']}")
    for title, key in (("domain", "per_domain"), ("cardinality", "per_cardinality")):
        rows = [{**block, "name": name} for name, block in metrics[key].items()]
        columns = ((title, "<16", "name"), ("acc", ">8.3f", "accuracy_mean"), ("std", ">8.3f", "accuracy_std"),
                   ("random", ">8.3f", "random_baseline"), ("adjusted", ">9.3f", "accuracy_mean_adjusted"), ("n", ">7", "instances"))
        click.echo("\n" + text_table(rows, columns))


@click.command("bear-dataset", cls=OneValueCommand)
@click.option("--dataset", default="bear", show_default=True, help="'bear', 'bear-big' or a folder in the lm-pub-quiz format.")
@data_dir_option
@click.option("--relations", default=None, help="Comma-separated relation codes, e.g. P19,P20 (default all).")
@click.option("--max-instances", type=click.IntRange(min=1), default=None, help="At most N instances per relation (sampled with --seed).")
@seed_option
@model_options()
@PLL_OPTION
@out_option("Output folder (default runs/DATASET[-RELATIONS]-dataset-N|all-MODEL).")
@token_budget_option(512, "Trie nodes per forward pass (masked LMs: padded tokens per batch, at least 512).")
@click.option("--domain-support", type=click.Choice(["divided", "full"]), default="divided", show_default=True,
              help="A relation with k domains adds 1/k of its support to each (lm-pub-quiz 0.3.3) or all of it.")
@click.option("--ties", type=click.Choice(["first", "wrong"]), default="first", show_default=True,
              help="A tie goes to the first answer in answer-space order (argmax, lm-pub-quiz 0.3.3) or counts as wrong.")
@click.option("--resummarise", is_flag=True,
              help="Recompute metrics.json/summary.md/metadata.json of the run in --out from its instances table "
                   "(no model, no scoring), e.g. under another --domain-support/--ties.")
@backend_option
@friendly_errors
def bear_dataset(dataset, model_name, pll_variant, out_dir, token_budget, resummarise, backend, **given):
    """The BEAR score of a data set (BEAR, BEAR-big or a folder in the lm-pub-quiz format).

    Accuracy per template, mean and spread, per relation/domain/cardinality, random baseline;
    writes the instances table, metrics.json, summary.md and metadata.json.  Finished relations
    are stored, so an interrupted run resumes.  Python: bear_ref.bear_dataset(...).
    """
    import bear_ref
    from bear_ref.api import DatasetSelection
    from bear_ref.dataset import check_out_dir, resummarise_bear_dataset
    from deer.backends import open_backend
    from deer.platform.inputs import check_inputs
    from deer.platform.run_options import ModelLoading
    from deer.platform.run_spec import run_folder_name
    from kg_data.bear import load_bear_dataset

    started = time.perf_counter()
    selection = DatasetSelection(given["data_dir"], comma_list(given["relations"]), given["max_instances"], given["seed"])
    loading, metric_convention = ModelLoading(given["dtype"], given["device"]), {"domain_support": given["domain_support"], "ties": given["ties"]}
    if resummarise:  # no model runs: what only loads or runs one is refused, not dropped
        refuse_given(MODEL_RUN_OPTIONS, "not read with --resummarise, which recomputes the metrics from the instances table")
    check_inputs(None if resummarise else model_name, out=out_dir or RUNS_DIR, seed=selection.seed, token_budget=token_budget,
                 dtype=loading.dtype, device=loading.device, max_instances=selection.max_instances)
    codes = selection.relations
    data = load_bear_dataset(dataset, selection.data_dir, relations=codes, max_instances=selection.max_instances, seed=selection.seed)
    click.echo(f"{data.name}: {len(data.relations)} relations, {data.n_instances} instances, {data.n_statements} statements")
    out = Path(out_dir) if out_dir else RUNS_DIR / run_folder_name(
        data.name + (f"-{'+'.join(codes)}" if codes else ""), model_name, split="dataset", subset=selection.max_instances)
    if resummarise:
        result = resummarise_bear_dataset(out, data, **metric_convention)
        _print_bear_dataset_summary(result.metrics.to_dict())
        click.echo(f"\nrecomputed from the instances table: {out}")
        return
    check_out_dir(out)  # a folder holding another kind of run: refused now, not once the model is loaded
    runner = open_backend(backend, model_name, dtype=loading.dtype, device=loading.device, token_budget=token_budget)
    result = bear_ref.bear_dataset(data, runner, selection=selection, pll_variant=pll_variant, out=out, **metric_convention)
    _print_bear_dataset_summary(result.metrics.to_dict())
    click.echo(f"\n{result.metadata['work'].get('tokens', 0)} tokens through the model; total {time.perf_counter() - started:.1f}s")
    click.echo(f"results: {out}")
