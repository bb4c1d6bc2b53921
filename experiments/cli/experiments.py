"""`deer experiment ...`: compute-time, token-bias, agreement, screen, training-demo, size-trend.

Each reads run folders (``--run DIR``) or runs the probes itself into ``--runs-dir`` (the folders
``deer probe`` uses), so expensive runs are shared; results (CSV, markdown, PNG, JSON) go to ``--out``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import click

from deer.backends.batching import CPU_TOKEN_BUDGET
from deer.platform.tables import format_number, text_table
from experiments.cli.cloze import comma_list, is_benchmark, run_benchmark_of
from experiments.cli.options import (
    OneValueGroup,
    friendly_errors,
    kg_options,
    kg_run_options,
    loading_of,
    model_options,
    models_or_default,
    one_model_option,
    out_option,
    refuse_given,
    run_options_of,
    stacked,
    template_options,
    token_budget_option,
)
from experiments.cli.probes import MODEL_RUN_OPTIONS, QUERY_OPTIONS, prepare_queries


def echo_results(result: dict) -> None:
    """The output folder, and any figure left out for want of the plots extra (the numbers are all written)."""
    for name, why in result.get("figures_skipped", {}).items():
        click.echo(f"figure {name}.png not drawn: {why}")
    click.echo(f"results: {result['out_dir']}")


kg_and_run_options = stacked(
    kg_run_options(multiple_models=True, exclude_head=False),
    click.option("--run", "run_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
                 help="Existing run folder (ranks table); repeat for several models. Skips running probes."),
    click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
                 help="Where probe runs made by this command go (one folder per model)."),
    click.option("--rank-type", type=click.Choice(["filtered", "raw"]), default="filtered", show_default=True),
    token_budget_option(None, f"DEER: max padded tokens per batch (default: {CPU_TOKEN_BUDGET} on the CPU, "
                              "from the free memory on a GPU)."),
    click.option("--no-cache", is_flag=True, help="Re-encode and re-score instead of reusing caches/runs."),
)


def results_out(default: str):
    return out_option("Folder for the tables, figures and JSON.", default=default)


def _collect_runs(given: dict, probes, ray_address=None, single_token=False):
    """(runs, settings): runs read from --run folders, or made now for each --model (``ray_address``: one Ray task
    per model, "" a local Ray; ``single_token``: LAMA's single-token protocol)."""
    from experiments.runs import label_runs_apart, load_run, probe_series

    if given["run_dirs"]:
        refuse_run_making_options(given)
        runs = [load_run(Path(d)) for d in given["run_dirs"]]
        label_runs_apart(runs)  # two checkpoint-10 of two training runs, or one model's runs in two folders, stay apart
        return runs, {"source": "run folders", "runs": list(given["run_dirs"])}
    names = models_or_default(given["model_names"])
    queries, templates = prepare_queries(given["kg"], run_options_of(given), model_names=names, out_dir=given["runs_dir"],
                                         out_name="runs_dir")
    click.echo(f"probes {', '.join(probes)}" + (", single-token names only" if single_token else ""))
    options = {"dtype": given["dtype"], "device": given["device"], "token_budget": given["token_budget"],
               "use_cache": not given["no_cache"], "runs_dir": Path(given["runs_dir"])}
    more = {}
    if single_token:
        runs, more = _single_token_runs(queries, names, probes, templates, options)
    elif ray_address is not None:
        from experiments.ray_runs import run_probes_on_ray

        runs = run_probes_on_ray(queries, names, probes, templates, address=ray_address or None, **options)
    else:
        runs = probe_series(queries, names, probes, templates, log=click.echo, **options)  # identical weights probed once
    label_runs_apart(runs, names)  # two checkpoint-10 of two training runs stay apart
    return runs, {"source": "probes run now", "kg": queries.kg.name, "split": given["split"], "subset": given["subset"],
                  "seed": given["seed"], "models": names, "probes": list(probes), "templates": templates.to_metadata(),
                  "runs": [str(r.folder) for r in runs], **more}


# What only making runs reads: with --run (finished runs read back) each is refused by name, not dropped.
RUN_MAKING_OPTIONS = (MODEL_RUN_OPTIONS | set(QUERY_OPTIONS) | {"model_names", "runs_dir", "checkpoint_dir", "base_model", "use_ray",
                                                                 "ray_address"}) - {"seed"}  # seed: also the bootstrap's


def refuse_run_making_options(given: dict) -> None:
    if given["run_dirs"]:
        refuse_given(RUN_MAKING_OPTIONS, "not read with --run, which reads finished runs instead of making them")


def _single_token_runs(queries, names, probes, templates, options: dict):
    """(runs, settings to add): ``run_probes`` per model on its single-token queries and candidates (LAMA's protocol)."""
    from bear_ref.lama_probe import restrict_to_single_token
    from deer.backends import DEFAULT_BACKEND, open_backend
    from experiments.runs import run_probes

    runs, sizes = [], {}
    for model_name in names:
        runner = open_backend(DEFAULT_BACKEND, model_name, dtype=options["dtype"], device=options["device"])
        restricted = restrict_to_single_token(queries, runner.tokenizer)
        click.echo(f"  {model_name}: {len(restricted)} queries x {len(restricted.candidates)} single-token candidates")
        sizes[model_name] = {"queries": len(restricted), "candidates": int(len(restricted.candidates))}
        runs.append(run_probes(restricted, runner, probes, None, templates, log=click.echo,
                               probe_options={"lama": {"single_token": True}}, **options))
    return runs, {"single_token_sizes": sizes, "queries_before_restriction": len(queries),
                  "candidates_before_restriction": int(len(queries.candidates))}


def _parse_probes(text: str) -> list[str]:
    from deer.probes import probe_names

    return _known(text.lower(), probe_names(), "probe")


def _asked_probes(runs, probe_list: list[str]) -> list[str] | None:
    """--probes as given (None: its default, the probes a run has); a run lacking one is a UsageError."""
    if click.get_current_context().get_parameter_source("probes").name == "DEFAULT":
        return None
    for run in runs:
        lacking = [probe for probe in probe_list if probe not in run.probes]
        if lacking:
            raise click.UsageError(f"{run.folder} has no {', '.join(lacking)} ranks (it has {', '.join(run.probes)}); "
                                   "leave them out of --probes, or probe them into that folder first")
    return probe_list


def _known(text: str, allowed, kind: str) -> list[str]:
    names = list(dict.fromkeys(comma_list(text) or []))  # each once, as --probe does: a repeat was timed/tabled twice
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise click.BadParameter(f"unknown {kind}(s) {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return names


def _parse_ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got '{text}'") from None


def _fmt(value, digits: int = 3) -> str:
    return format_number(value, f".{digits}f")


def _seconds(value) -> str:
    return "-" if math.isnan(value) else f"{value:.3g} s"


MODEL_24, PROBE_7, N_6 = ("model", "<24", lambda row: row["model"][:23]), ("probe", "<7"), ("n", ">6")


@click.group(cls=OneValueGroup, context_settings={"help_option_names": ["-h", "--help"]})
def experiment():
    """Experiments of the DEER paper on your models and KGs.

    \b
    compute-time  DEER timed vs BEAR extrapolated from query subsets (Table 1)
    token-bias    correlation of gold tail token length with its rank (Figure 4)
    agreement     correlation of gold ranks between DEER, BEAR and LAMA
    screen        leaderboard of many checkpoints by DEER (and a reference probe)
    training-demo fine-tune on KG triples while DEER probes seen and held-out triples
    """


@experiment.command("token-bias")
@kg_and_run_options
@click.option("--probes", default="deer,bear", show_default=True, help="Probes to run/compare (deer, bear, lama).")
@results_out("results/token-bias")
@friendly_errors
def token_bias_command(rank_type, probes, out_dir, **given):
    """Pearson r / Spearman rho between gold tail token length and rank, per probe; box plot.

    Paper: 500 WN18RR test queries (--subset 500), BEAR r = 0.48, DEER r = 0.005.
    """
    from experiments.token_bias import run_token_bias

    probe_list = _parse_probes(probes)
    runs, settings = _collect_runs(given, probe_list)
    _asked_probes(runs, probe_list)
    result = run_token_bias(runs, Path(out_dir), rank_type=rank_type, probes=probe_list, settings=settings)
    click.echo(f"\ntoken length vs {rank_type} rank (paper: BEAR r=0.48, DEER r=0.005)")
    click.echo(text_table(result["correlations"], (MODEL_24, PROBE_7, N_6, ("pearson r", ">11", "pearson_r", _fmt),
                                                   ("p", ">11.2g", "pearson_p"), ("spearman", ">10", "spearman_rho", _fmt))))
    echo_results(result)


@experiment.command("agreement")
@kg_and_run_options
@click.option("--probes", default="deer,bear,lama", show_default=True, help="Probes to run/compare.")
@click.option("--hit-k", type=click.IntRange(min=1), default=10, show_default=True, help="k of the Hit@k quadrants in the scatter plots.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True, help="Bootstrap resamples for the log-rank r interval (0: none).")
@click.option("--single-token", is_flag=True,
              help="LAMA's own protocol, as the paper's agreement: every probe ranks only the candidates whose name "
                   "is one token, on the queries whose gold tail is one (its own run folder). With --run: the "
                   "folders' LAMA must have been run so (e.g. `deer probe --probe lama,deer --probe-option single_token=true`).")
@results_out("results/agreement")
@friendly_errors
def agreement_command(rank_type, probes, hit_k, bootstrap, single_token, out_dir, **given):
    """Pearson r of gold ranks between probes (linear and log), Hit@1/10/100 side by side, scatter plots.

    Paper: DEER vs LAMA log-rank r = 0.50 (OPT-350M) to 0.80 (OPT-6.7B), LAMA on single-token
    names only (596 test queries x 4,948 entities): --single-token without --subset. Without
    it LAMA ranks every name by its first token; each row says which protocol it used.
    --kg lama / bear / bear-big: the cloze benchmarks (`deer cloze`): per-fact agreement per model
    and, with several --model, orderings.md (the models ordered by each probe).
    """
    from experiments.agreement import lama_protocol, run_agreement
    from experiments.stats import caveat_lines

    probe_list = _parse_probes(probes)
    if not given["run_dirs"] and is_benchmark(given["kg"]):  # LAMA / BEAR data set: per-fact agreement per model, and orderings
        return run_benchmark_of(given, given["model_names"], probe_list, out_dir, honoured=("probes", "bootstrap"), bootstrap=bootstrap)
    runs, settings = _collect_runs(given, probe_list, single_token=single_token)
    if single_token:
        other = [str(run.folder) for run in runs if lama_protocol(run) != "single-token"]
        if other:
            raise click.UsageError(f"--single-token: the LAMA ranks in {', '.join(other)} were not made with the "
                                   "single-token protocol (or are missing); run `deer probe --probe lama,deer --probe-option single_token=true` "
                                   "or this command with --single-token --model")
    result = run_agreement(runs, Path(out_dir), rank_type=rank_type, hit_k=hit_k, bootstrap=bootstrap, seed=given["seed"],
                           settings={**settings, "single_token": single_token},
                           probes=_asked_probes(runs, probe_list))
    click.echo(f"\nagreement of {rank_type} gold ranks (paper: DEER vs LAMA log-rank r = 0.50 .. 0.80, "
               f"{result['paper']['lama_protocol_detail']})")
    click.echo(text_table(result["pairs"], (
        MODEL_24, ("pair", "<16"), N_6, ("r", ">8", "pearson_r", _fmt), ("r (log)", ">9", "pearson_r_log", _fmt),
        ("p (log)", ">10.2g", "pearson_p_log"),
        ("95% CI (log)", ">18", lambda row: f"[{_fmt(row['pearson_r_log_ci_low'], 2)}, {_fmt(row['pearson_r_log_ci_high'], 2)}]"),
        ("  LAMA protocol", "", lambda row: f"  {row['lama_protocol'] or '-'}"))))
    for line in caveat_lines(result["pairs"], "model", "pair"):
        click.echo(line)
    hits = [(f"Hit@{k}", ">14", lambda row, k=k: f"{_fmt(row[f'hit@{k}'])}±{_fmt(row[f'hit@{k}_se'])}") for k in (1, 10, 100)]
    click.echo("\n" + text_table(result["hits"], (MODEL_24, PROBE_7, *hits)))
    echo_results(result)


@experiment.command("screen")
@kg_and_run_options
@click.option("--reference", type=click.Choice(["none", "bear", "lama"]), default="none", show_default=True,
              help="Also run a reference probe and compare the model orderings.")
@click.option("--metric", type=click.Choice(["hit@1", "hit@3", "hit@10", "hit@100", "mrr"]), default="hit@10",
              show_default=True, help="Leaderboard order.")
@click.option("--checkpoints", "checkpoint_dir", type=click.Path(file_okay=False), default=None,
              help="A Trainer output folder: screen its checkpoint-<step> folders (and its final model) by step, "
                   "with curves of every metric against the step.")
@click.option("--base-model", default=None,
              help="The model the series started from (alias, hub id or folder): screened first, as step 0 of the curves.")
@click.option("--ray", "use_ray", is_flag=True, help="One Ray task per checkpoint on a local Ray (pip install .[ray]).")
@click.option("--ray-address", default=None, help="One Ray task per checkpoint on this running Ray cluster (implies --ray).")
@results_out("results/screen")
@friendly_errors
def screen_command(rank_type, reference, metric, checkpoint_dir, base_model, use_ray, ray_address, out_dir, **given):
    """Leaderboard of many checkpoints by DEER, reusing cached work: repeat --model (folders, aliases
    or hub ids, a revision as id@revision), give --checkpoints DIR (a Trainer output folder), or --run.

    Each checkpoint gets its own run folder under --runs-dir; embeddings are cached per checkpoint
    (by its weights), so a re-run or a longer series encodes only the new checkpoints.  With
    --reference bear|lama: also that probe's leaderboard and the Spearman/Kendall correlation
    between the two model orderings (run the reference on a smaller --subset).
    --kg lama / bear / bear-big: each checkpoint on that benchmark (`deer cloze`), with orderings.md.
    """
    from experiments.checkpoints import Checkpoint, named_checkpoints, trainer_checkpoints
    from experiments.runs import model_label
    from experiments.screen import run_screen

    refuse_run_making_options(given)  # before the series is read: --checkpoints with --run is refused by name
    reference = None if reference == "none" else reference
    probe_list = ["deer"] + ([reference] if reference else [])
    series = named_checkpoints(given["model_names"]) + (trainer_checkpoints(checkpoint_dir) if checkpoint_dir else [])
    if base_model:  # the series' step 0
        series.insert(0, Checkpoint(model_label(base_model), base_model, 0))
    # Every checkpoint takes the --model-arg / --adapter: a --checkpoints folder's and --base-model as each --model.
    series = [dataclasses.replace(c, model=loading_of(click.get_current_context(), c.model)) for c in series]
    if not given["run_dirs"] and is_benchmark(given["kg"]):  # LAMA / BEAR data set: every checkpoint on it, and the orderings
        return run_benchmark_of(given, [c.model for c in series], probe_list, out_dir,
                                honoured=("reference", "checkpoint_dir", "base_model"))
    ray_address = ray_address if ray_address else ("" if use_ray else None)
    runs, settings = _collect_runs({**given, "model_names": tuple(c.model for c in series)}, probe_list, ray_address)
    steps = {run.label: checkpoint.step for run, checkpoint in zip(runs, series, strict=False)} if series else None
    result = run_screen(runs, Path(out_dir), reference=reference, metric=metric, rank_type=rank_type, settings=settings, steps=steps)
    click.echo(f"\nDEER leaderboard by {metric} ({rank_type})")
    click.echo(text_table(result["leaderboard"], (
        ("#", ">3", "place"), (" model", "<29", lambda row: f" {row['model'][:27]}"), N_6, ("Hit@1", ">8.3f"),
        ("Hit@10", ">8.3f"), ("±se", ">7.3f", "hit@10_se"), ("MRR", ">8.4f"), ("cached", ">8", lambda row: row.get("from_cache", 0)),
        ("", "", lambda row: f"  same weights as {row['same_weights_as']}" if row.get("same_weights_as") else ""))))
    if reference:
        for name in ("hit@10", "mrr"):
            o = result["ordering_agreement"][name]
            click.echo(f"ordering DEER vs {reference} by {name}: Spearman {_fmt(o['spearman_rho'])} (p {_fmt(o['spearman_p'])}), "
                       f"Kendall {_fmt(o['kendall_tau'])} (p {_fmt(o['kendall_p'])}), {o['n_models']} models"
                       + (f" ({o['caveat']})" if o.get("caveat") else ""))
    echo_results(result)


@experiment.command("training-demo")
@one_model_option("Model to fine-tune (alias, hub id or folder).")
@click.option("--kg", default="wn18rr", show_default=True, help="KG name or folder.")
@click.option("--data-dir", default=None, help="Where the KG's files are (default: the usual search).")
@click.option("--queries", "n_queries", type=click.IntRange(min=1), default=50, show_default=True,
              help="Train triples to fine-tune on (the seen set) and test triples held out.")
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True, help="Optimizer steps.")
@click.option("--every", type=click.IntRange(min=1), default=25, show_default=True, help="Probe every N steps (and at step 0).")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--learning-rate", type=float, default=1e-4, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--no-bear", is_flag=True, help="Skip the final BEAR run on the held-out set (the cost comparison).")
@results_out("results/probe-while-training")
@friendly_errors
def training_demo_command(model_name, no_bear, out_dir, **options):
    """Fine-tune a model on verbalised KG triples with the HF Trainer while DeerCallback probes the
    triples it trains on (seen) and held-out test triples: curves of Hit@10 and MRR against the step."""
    from experiments.training_demo import run_training_demo

    result = run_training_demo(Path(out_dir), model=model_name, bear=not no_bear, **options)
    click.echo(text_table(result["rows"], (("set", "<9"), ("step", ">6"), ("Hit@1", ">8.3f"), ("Hit@10", ">8.3f"),
                                           ("MRR", ">8.4f"), ("probe s", ">9.1f", "probe_seconds"))))
    click.echo(f"training {result['train_seconds_per_step']:.2f} s/step")
    echo_results(result)


@experiment.command("compute-time")
@kg_options(subset=False)
@template_options
@model_options()
@click.option("--query-sizes", default=",".join(map(str, range(16, 152, 15))), show_default=True,
              help="|Q| values timed for the BEAR linear fit (paper: 16,31,...,151).")
@click.option("--candidates", type=click.IntRange(min=2), default=None,
              help="Entities per query for bear_ref (default all; sampled, gold tails kept, at least 2). When reduced, only the "
                   "per-statement part of its time is scaled to all entities; the per-query context pass is not.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed runs per size, each on a fresh independent query sample.")
@click.option("--plain-statements", type=click.IntRange(min=1), default=32, show_default=True,
              help="Statements per query timed for the plain scorer (scaled to all entities).")
@click.option("--deer-queries", type=click.IntRange(min=1), default=None, help="DEER: queries timed (default all of --split).")
@click.option("--deer-candidates", type=click.IntRange(min=1), default=None, help="DEER: entities timed (default all); scaled to all.")
@click.option("--target", default="all", show_default=True,
              help="Queries to extrapolate to: 'all' triples of every split (paper) or a split name.")
@click.option("--scorers", default="bear_ref,plain", show_default=True, help="BEAR scorers to time (bear_ref, plain).")
@click.option("--no-warmup", is_flag=True, help="Do not run a small untimed warm-up first.")
@token_budget_option(None, f"DEER: max padded tokens per batch (default: the probe's own, {CPU_TOKEN_BUDGET} on the CPU, "
                           "from the free memory on a GPU).")
@results_out("results/compute-time")
@friendly_errors
def compute_time_command(kg, model_name, query_sizes, scorers, no_warmup, out_dir, **given):
    """DEER timed directly vs BEAR timed on query subsets and extrapolated by a linear fit (Table 1).

    BEAR: OLS of time on |Q| over independent random query subsets (--query-sizes x --repeats).
    With --candidates C, each subset is also timed with 1 statement per query, so the fixed
    per-query context time is kept apart and only the per-statement time is scaled by N/C.
    Each row's basis says exactly how it was extrapolated.
    Paper: DEER 16 min vs BEAR 330 days (93,003 WN18RR triples x 40,943 entities, GPT-2, RTX 3090).
    """
    from deer.backends import open_backend
    from deer.platform.inputs import check_inputs
    from experiments.compute_time import TimingPlan, run_compute_time
    from experiments.reference import TIMED_SCORERS
    from kg_data import load_kg

    scorer_list = _known(scorers, TIMED_SCORERS, "scorer")
    options = run_options_of(given)
    seed, loading, token_budget = options.selection.seed, options.loading, options.budget.token_budget
    check_inputs(model_name, out=out_dir, seed=seed, k_shot=options.templates.k_shot, dtype=loading.dtype, device=loading.device,
                 token_budget=token_budget)
    knowledge_graph = load_kg(kg, given["data_dir"])
    loaded = open_backend("hf", model_name, dtype=loading.dtype, device=loading.device).loaded  # it times hf's kernels
    timing = {name: given[name] for name in ("candidates", "repeats", "plain_statements", "deer_queries", "deer_candidates", "target")}
    plan = TimingPlan(query_sizes=_parse_ints(query_sizes), scorers=scorer_list, seed=seed, warmup=not no_warmup, **timing)
    result = run_compute_time(knowledge_graph, loaded, options.templates, Path(out_dir), plan, split=options.selection.split,
                              settings={"model": model_name}, log=click.echo, token_budget=token_budget)
    click.echo(f"\ncompute time for {result['target_queries']} queries x {result['entities']} entities "
               f"(paper: DEER 16 min, BEAR 330 days)")
    lines = text_table(result["table"], (
        ("method", "<40"), ("s/query", ">11.3g", "time_per_query_s"), ("total", ">14"),
        ("± se (fit)", ">12", "total_se_fit", _seconds), ("± runs", ">12", "total_std_over_runs", _seconds),
        ("vs DEER", ">10", lambda row: f"{row['speed_up_vs_deer']:.3g}x"))).split("\n")
    click.echo(lines[0])
    for line, row in zip(lines[1:], result["table"], strict=True):
        click.echo(f"{line}\n    {row['basis']}")
    echo_results(result)


@experiment.command("size-trend")
@click.option("--agreement", "agreement_json", type=click.Path(dir_okay=False, exists=True), required=True,
              help="agreement.json of `deer experiment agreement` over several models on the same queries.")
@out_option("Folder for size_trend.csv/.md/.json/.png.", default="results/size-trend")
@friendly_errors
def size_trend_command(agreement_json, out_dir):
    """Agreement (Pearson r of log ranks, 95% CI) against parameter count, beside the paper's OPT points.

    Python: experiments.size_trend.write_size_trend(agreement_json, out).
    """
    from experiments.size_trend import write_size_trend

    table = write_size_trend(agreement_json, out_dir)
    for row in table.itertuples():
        click.echo(f"{row.pair:<14}{row.model:<22}{row.parameters / 1e6:>8,.0f}M  r = {row.r:.3f} [{row.ci_low:.2f}, {row.ci_high:.2f}]")
    click.echo(f"results: {out_dir}/size_trend.md, size_trend.png")
