"""`deer experiment ...`: compute-time, token-bias, agreement, screen.

Each subcommand either reads existing run folders (``--run DIR``, as written by ``deer probe``
and the bear_ref probes) or runs the probes itself through the API (``--kg --model --subset``) into
``--runs-dir`` (default ``runs/``, the folders ``deer probe`` uses), so expensive runs are shared.
Results (CSV + markdown tables, PNG figures, one JSON) go to ``--out``.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from deer.backends.batching import CPU_TOKEN_BUDGET
from deer.platform.models import DEFAULT_MODEL
from deer.platform.tables import format_number
from experiments.cli.cloze import is_benchmark, run_benchmark_command
from experiments.cli.options import (
    friendly_errors,
    kg_options,
    kg_run_options,
    model_options,
    out_option,
    template_options,
    token_budget_option,
)
from experiments.cli.probes import prepare_queries


def echo_results(result: dict) -> None:
    """The output folder, and any figure left out for want of the plots extra (the numbers are all written)."""
    for name, why in result.get("figures_skipped", {}).items():
        click.echo(f"figure {name}.png not drawn: {why}")
    click.echo(f"results: {result['out_dir']}")


def run_source_options(command):
    """--run (repeatable), --runs-dir, --probes, --rank-type, --token-budget, --no-cache."""
    command = click.option("--no-cache", is_flag=True, help="Re-encode and re-score instead of reusing caches/runs.")(command)
    command = token_budget_option(None, f"DEER: max padded tokens per batch (default: {CPU_TOKEN_BUDGET} on the CPU, from the free memory on a GPU).")(command)
    command = click.option("--rank-type", type=click.Choice(["filtered", "raw"]), default="filtered", show_default=True)(command)
    command = click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
                           help="Where probe runs made by this command go (one folder per model).")(command)
    command = click.option("--run", "run_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
                           help="Existing run folder (ranks table); repeat for several models. Skips running probes.")(command)
    return command


def results_out(default: str):
    return out_option("Folder for the tables, figures and JSON.", default=default)


def _collect_runs(run_dirs, kg, data_dir, split, subset, seed, model_names, probes, runs_dir, dtype, device,
                  k_shot, shots, query_trailing_space, template_style, token_budget, no_cache, ray_address=None):
    """Runs read from --run folders, or made now for each --model (``ray_address``: one Ray task per
    model; "" a local Ray); returns (runs, settings)."""
    from experiments.runs import label_runs_apart, load_run, probe_series

    if run_dirs:
        if model_names:
            raise click.UsageError("give either --run folders or --model names, not both")
        runs = [load_run(Path(d)) for d in run_dirs]
        label_runs_apart(runs)  # two checkpoint-10 of two training runs, or one model's runs in two folders, stay apart
        return runs, {"source": "run folders", "runs": list(run_dirs)}
    queries, templates = prepare_queries(kg, data_dir, split, subset, seed, k_shot, shots, query_trailing_space, template_style,
                                         model_names=model_names or (DEFAULT_MODEL,), dtype=dtype, device=device,
                                         out_dir=runs_dir, out_name="runs_dir", token_budget=token_budget)
    click.echo(f"probes {', '.join(probes)}")
    names = list(model_names or (DEFAULT_MODEL,))
    options = {"dtype": dtype, "device": device, "token_budget": token_budget, "use_cache": not no_cache, "runs_dir": Path(runs_dir)}
    if ray_address is not None:
        from experiments.ray_runs import run_probes_on_ray

        runs = run_probes_on_ray(queries, names, probes, templates, address=ray_address or None, **options)
    else:
        runs = probe_series(queries, names, probes, templates, log=click.echo, **options)  # identical weights probed once
    label_runs_apart(runs, names)  # two checkpoint-10 of two training runs stay apart
    settings = {"source": "probes run now", "kg": queries.kg.name, "split": split, "subset": subset, "seed": seed,
                "models": list(model_names or (DEFAULT_MODEL,)), "probes": list(probes),
                "templates": templates.to_metadata(), "runs": [str(r.folder) for r in runs]}
    return runs, settings


def _parse_probes(text: str) -> list[str]:
    """Comma-separated names of registered probes (``deer probes``)."""
    from deer.probes import probe_names

    allowed = probe_names()
    probes = [p.strip().lower() for p in text.split(",") if p.strip()]
    unknown = [p for p in probes if p not in allowed]
    if unknown:
        raise click.BadParameter(f"unknown probe(s) {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return probes


def _parse_ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got '{text}'") from None


def _fmt(value, digits: int = 3) -> str:
    return format_number(value, f".{digits}f")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@kg_run_options(multiple_models=True, exclude_head=False)
@run_source_options
@click.option("--probes", default="deer,bear", show_default=True, help="Probes to run/compare (deer, bear, lama).")
@results_out("results/token-bias")
@friendly_errors
def token_bias_command(kg, data_dir, split, subset, seed, model_names, dtype, device, k_shot, shots, query_trailing_space, template_style,
                       run_dirs, runs_dir, rank_type, token_budget, no_cache, probes, out_dir):
    """Pearson r / Spearman rho between gold tail token length and rank, per probe; box plot.

    Paper: 500 WN18RR test queries (--subset 500), BEAR r = 0.48, DEER r = 0.005.
    """
    from experiments.token_bias import run_token_bias

    probe_list = _parse_probes(probes)
    runs, settings = _collect_runs(run_dirs, kg, data_dir, split, subset, seed, model_names, probe_list, runs_dir, dtype,
                                   device, k_shot, shots, query_trailing_space, template_style, token_budget, no_cache)
    result = run_token_bias(runs, Path(out_dir), rank_type=rank_type, probes=probe_list, settings=settings)
    click.echo(f"\ntoken length vs {rank_type} rank (paper: BEAR r=0.48, DEER r=0.005)")
    click.echo(f"{'model':<24}{'probe':<7}{'n':>6}{'pearson r':>11}{'p':>11}{'spearman':>10}")
    for row in result["correlations"]:
        click.echo(f"{row['model'][:23]:<24}{row['probe']:<7}{row['n']:>6}{_fmt(row['pearson_r']):>11}"
                   f"{row['pearson_p']:>11.2g}{_fmt(row['spearman_rho']):>10}")
    echo_results(result)


def _single_token_runs(kg, data_dir, split, subset, seed, model_names, probes, runs_dir, dtype, device,
                       k_shot, shots, query_trailing_space, template_style, token_budget, no_cache):
    """As ``_collect_runs`` with models, on LAMA's single-token protocol: per model (its tokenizer
    decides), only single-token candidates and the queries whose gold tail is one; LAMA is told."""
    from deer.platform.models import open_model
    from experiments.reference import single_token_queries
    from experiments.runs import label_runs_apart, run_probes

    queries, templates = prepare_queries(kg, data_dir, split, subset, seed, k_shot, shots, query_trailing_space, template_style,
                                         model_names=model_names or (DEFAULT_MODEL,), dtype=dtype, device=device,
                                         out_dir=runs_dir, out_name="runs_dir", token_budget=token_budget)
    click.echo(f"probes {', '.join(probes)}, single-token names only")
    runs, sizes = [], {}
    for model_name in model_names or (DEFAULT_MODEL,):
        loaded = open_model(model_name, dtype=dtype, device=device)  # once: its tokenizer decides, then it runs
        restricted = single_token_queries(queries, loaded.tokenizer)
        click.echo(f"  {model_name}: {len(restricted)} queries x {len(restricted.candidates)} single-token candidates")
        sizes[model_name] = {"queries": len(restricted), "candidates": int(len(restricted.candidates))}
        runs.append(run_probes(restricted, loaded, probes, None, templates, dtype=dtype, device=device,
                               token_budget=token_budget, use_cache=not no_cache, log=click.echo, runs_dir=Path(runs_dir),
                               probe_options={"lama": {"single_token": True}}))
    label_runs_apart(runs, list(model_names or (DEFAULT_MODEL,)))
    settings = {"source": "probes run now", "kg": queries.kg.name, "split": split, "subset": subset, "seed": seed,
                "models": list(model_names or (DEFAULT_MODEL,)), "probes": list(probes),
                "templates": templates.to_metadata(), "runs": [str(r.folder) for r in runs],
                "single_token_sizes": sizes, "queries_before_restriction": len(queries),
                "candidates_before_restriction": int(len(queries.candidates))}
    return runs, settings


@experiment.command("agreement")
@kg_run_options(multiple_models=True, exclude_head=False)
@run_source_options
@click.option("--probes", default="deer,bear,lama", show_default=True, help="Probes to run/compare.")
@click.option("--hit-k", type=click.IntRange(min=1), default=10, show_default=True, help="k of the Hit@k quadrants in the scatter plots.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True, help="Bootstrap resamples for the log-rank r interval (0: none).")
@click.option("--single-token", is_flag=True,
              help="LAMA's own protocol, as the paper's agreement: every probe ranks only the candidates whose name "
                   "is one token, on the queries whose gold tail is one (its own run folder). With --run: the "
                   "folders' LAMA must have been run so (e.g. `deer lama --single-token --with-deer`).")
@results_out("results/agreement")
@friendly_errors
def agreement_command(kg, data_dir, split, subset, seed, model_names, dtype, device, k_shot, shots, query_trailing_space, template_style,
                      run_dirs, runs_dir, rank_type, token_budget, no_cache, probes, hit_k, bootstrap, single_token, out_dir):
    """Pearson r of gold ranks between probes (linear and log), Hit@1/10/100 side by side, scatter plots.

    Paper: DEER vs LAMA log-rank r = 0.50 (OPT-350M) to 0.80 (OPT-6.7B), LAMA on single-token
    names only (596 test queries x 4,948 entities): --single-token without --subset. Without
    it LAMA ranks every name by its first token; each row says which protocol it used.
    --kg lama / bear / bear-big: the cloze benchmarks (`deer cloze`): per-fact agreement per model
    and, with several --model, orderings.md (the models ordered by each probe).
    """
    from experiments.agreement import lama_protocol, run_agreement

    probe_list = _parse_probes(probes)
    if not run_dirs and is_benchmark(kg):  # LAMA / BEAR data set: per-fact agreement per model, and model orderings
        return run_benchmark_command(kg, list(model_names) or [DEFAULT_MODEL], probe_list, out_dir, data_dir=data_dir, dtype=dtype,
                                     device=device, max_facts=subset, seed=seed, token_budget=token_budget, bootstrap=bootstrap,
                                     cache=not no_cache)
    if single_token and not run_dirs:
        runs, settings = _single_token_runs(kg, data_dir, split, subset, seed, model_names, probe_list, runs_dir, dtype,
                                            device, k_shot, shots, query_trailing_space, template_style, token_budget, no_cache)
    else:
        runs, settings = _collect_runs(run_dirs, kg, data_dir, split, subset, seed, model_names, probe_list, runs_dir,
                                       dtype, device, k_shot, shots, query_trailing_space, template_style, token_budget, no_cache)
    if single_token:
        other = [str(run.folder) for run in runs if lama_protocol(run) != "single-token"]
        if other:
            raise click.UsageError(f"--single-token: the LAMA ranks in {', '.join(other)} were not made with the "
                                   "single-token protocol (or are missing); run `deer lama --single-token --with-deer` "
                                   "or this command with --single-token --model")
    result = run_agreement(runs, Path(out_dir), rank_type=rank_type, hit_k=hit_k, bootstrap=bootstrap, seed=seed,
                           settings={**settings, "single_token": single_token})
    click.echo(f"\nagreement of {rank_type} gold ranks (paper: DEER vs LAMA log-rank r = 0.50 .. 0.80, "
               f"{result['paper']['lama_protocol_detail']})")
    click.echo(f"{'model':<24}{'pair':<16}{'n':>6}{'r':>8}{'r (log)':>9}{'p (log)':>10}{'95% CI (log)':>18}  LAMA protocol")
    for row in result["pairs"]:
        interval = f"[{_fmt(row['pearson_r_log_ci_low'], 2)}, {_fmt(row['pearson_r_log_ci_high'], 2)}]"
        click.echo(f"{row['model'][:23]:<24}{row['pair']:<16}{row['n']:>6}{_fmt(row['pearson_r']):>8}"
                   f"{_fmt(row['pearson_r_log']):>9}{row['pearson_p_log']:>10.2g}{interval:>18}  "
                   f"{row['lama_protocol'] or '-'}")
    from experiments.stats import caveat_lines

    for line in caveat_lines(result["pairs"], "model", "pair"):
        click.echo(line)
    click.echo(f"\n{'model':<24}{'probe':<7}{'Hit@1':>14}{'Hit@10':>14}{'Hit@100':>14}")
    for row in result["hits"]:
        cells = "".join(f"{_fmt(row[f'hit@{k}']) + '±' + _fmt(row[f'hit@{k}_se']):>14}" for k in (1, 10, 100))
        click.echo(f"{row['model'][:23]:<24}{row['probe']:<7}{cells}")
    echo_results(result)


@experiment.command("screen")
@kg_run_options(multiple_models=True, exclude_head=False)
@run_source_options
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
def screen_command(kg, data_dir, split, subset, seed, model_names, dtype, device, k_shot, shots, query_trailing_space, template_style,
                   run_dirs, runs_dir, rank_type, token_budget, no_cache, reference, metric, checkpoint_dir, base_model, use_ray,
                   ray_address, out_dir):
    """Leaderboard of many checkpoints by DEER, reusing cached work: repeat --model (folders, aliases
    or hub ids, a revision as id@revision), give --checkpoints DIR (a Trainer output folder), or --run.

    Each checkpoint gets its own run folder under --runs-dir; embeddings are cached per checkpoint
    (by its weights), so a re-run or a longer series encodes only the new checkpoints.  With
    --reference bear|lama: also that probe's leaderboard and the Spearman/Kendall correlation
    between the two model orderings (run the reference on a smaller --subset).
    --kg lama / bear / bear-big: each checkpoint on that benchmark (`deer cloze`), with orderings.md.
    """
    from experiments.checkpoints import named_checkpoints, trainer_checkpoints
    from experiments.screen import run_screen

    reference = None if reference == "none" else reference
    probe_list = ["deer"] + ([reference] if reference else [])
    series = named_checkpoints(model_names) + (trainer_checkpoints(checkpoint_dir) if checkpoint_dir else [])
    if base_model:  # the series' step 0 (its --model-arg / --adapter as every --model's)
        from experiments.checkpoints import Checkpoint
        from experiments.cli.options import loading_of
        from experiments.runs import model_label

        series.insert(0, Checkpoint(model_label(base_model), loading_of(click.get_current_context(), base_model), 0))
    if not run_dirs and is_benchmark(kg):  # LAMA / BEAR data set: every checkpoint on the benchmark, and the orderings
        return run_benchmark_command(kg, [c.model for c in series] or [DEFAULT_MODEL], probe_list, out_dir, data_dir=data_dir,
                                     dtype=dtype, device=device, max_facts=subset, seed=seed, token_budget=token_budget,
                                     cache=not no_cache)
    ray_address = ray_address if ray_address else ("" if use_ray else None)
    runs, settings = _collect_runs(run_dirs, kg, data_dir, split, subset, seed, tuple(c.model for c in series), probe_list, runs_dir,
                                   dtype, device, k_shot, shots, query_trailing_space, template_style, token_budget, no_cache,
                                   ray_address)
    steps = {run.label: checkpoint.step for run, checkpoint in zip(runs, series, strict=False)} if series else None
    result = run_screen(runs, Path(out_dir), reference=reference, metric=metric, rank_type=rank_type, settings=settings, steps=steps)
    click.echo(f"\nDEER leaderboard by {metric} ({rank_type})")
    click.echo(f"{'#':>3} {'model':<28}{'n':>6}{'Hit@1':>8}{'Hit@10':>8}{'±se':>7}{'MRR':>8}{'cached':>8}")
    for row in result["leaderboard"]:
        click.echo(f"{row['place']:>3} {row['model'][:27]:<28}{row['n']:>6}{row['hit@1']:>8.3f}{row['hit@10']:>8.3f}"
                   f"{row['hit@10_se']:>7.3f}{row['mrr']:>8.4f}{row.get('from_cache', 0):>8}"
                   + (f"  same weights as {row['same_weights_as']}" if row.get("same_weights_as") else ""))
    if reference:
        for name in ("hit@10", "mrr"):
            o = result["ordering_agreement"][name]
            click.echo(f"ordering DEER vs {reference} by {name}: Spearman {_fmt(o['spearman_rho'])} (p {_fmt(o['spearman_p'])}), "
                       f"Kendall {_fmt(o['kendall_tau'])} (p {_fmt(o['kendall_p'])}), {o['n_models']} models"
                       + (f" ({o['caveat']})" if o.get("caveat") else ""))
    echo_results(result)


@experiment.command("training-demo")
@click.option("--model", "model_name", default=DEFAULT_MODEL, show_default=True, help="Model to fine-tune (alias, hub id or folder).")
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
def training_demo_command(model_name, kg, data_dir, n_queries, steps, every, batch_size, learning_rate, seed, no_bear, out_dir):
    """Fine-tune a model on verbalised KG triples with the HF Trainer while DeerCallback probes the
    triples it trains on (seen) and held-out test triples: curves of Hit@10 and MRR against the step."""
    from experiments.training_demo import run_training_demo

    result = run_training_demo(Path(out_dir), model=model_name, kg=kg, n_queries=n_queries, steps=steps, every=every,
                               batch_size=batch_size, learning_rate=learning_rate, seed=seed, data_dir=data_dir, bear=not no_bear)
    click.echo(f"{'set':<9}{'step':>6}{'Hit@1':>8}{'Hit@10':>8}{'MRR':>8}{'probe s':>9}")
    for row in result["rows"]:
        click.echo(f"{row['set']:<9}{row['step']:>6}{row['hit@1']:>8.3f}{row['hit@10']:>8.3f}{row['mrr']:>8.4f}{row['probe_seconds']:>9.1f}")
    click.echo(f"training {result['train_seconds_per_step']:.2f} s/step")
    echo_results(result)


@experiment.command("compute-time")
@kg_options(subset=False)
@template_options
@model_options()
@click.option("--query-sizes", default=",".join(map(str, range(16, 152, 15))), show_default=True,
              help="|Q| values timed for the BEAR linear fit (paper: 16,31,...,151).")
@click.option("--candidates", type=click.IntRange(min=2), default=None,
              help="Entities per query for bear_ref (default all; sampled, gold tails kept, at least 2). When "
                   "reduced, only the per-statement part of its time is scaled to all entities; the per-query "
                   "context pass is not.")
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
def compute_time_command(kg, data_dir, split, seed, k_shot, shots, query_trailing_space, template_style, model_name, dtype,
                         device,
                         query_sizes, candidates, repeats, plain_statements, deer_queries, deer_candidates, target, scorers,
                         no_warmup, token_budget, out_dir):
    """DEER timed directly vs BEAR timed on query subsets and extrapolated by a linear fit (Table 1).

    BEAR: OLS of time on |Q| over independent random query subsets (--query-sizes x --repeats).
    With --candidates C, each subset is also timed with 1 statement per query, so the fixed
    per-query context time is kept apart and only the per-statement time is scaled by N/C.
    Each row's basis says exactly how it was extrapolated.
    Paper: DEER 16 min vs BEAR 330 days (93,003 WN18RR triples x 40,943 entities, GPT-2, RTX 3090).
    """
    from deer.platform.inputs import check_inputs
    from deer.platform.models import open_model
    from deer.platform.templates import PromptTemplates
    from experiments.compute_time import run_compute_time
    from experiments.reference import TIMED_SCORERS
    from kg_data import load_kg

    scorer_list = [s.strip() for s in scorers.split(",") if s.strip()]
    unknown = [s for s in scorer_list if s not in TIMED_SCORERS]
    if unknown:
        raise click.BadParameter(f"unknown scorer(s) {', '.join(unknown)}; choose from {', '.join(TIMED_SCORERS)}")
    check_inputs(model_name, out=out_dir, seed=seed, k_shot=k_shot, dtype=dtype, device=device, token_budget=token_budget)
    knowledge_graph = load_kg(kg, data_dir)
    templates = PromptTemplates(k_shot=k_shot, shots=shots, seed=seed, query_trailing_space=query_trailing_space,
                                style=template_style)
    loaded = open_model(model_name, dtype=dtype, device=device)
    result = run_compute_time(
        knowledge_graph, loaded, templates, Path(out_dir), split=split, query_sizes=_parse_ints(query_sizes),
        candidates=candidates, repeats=repeats, plain_statements=plain_statements, deer_queries=deer_queries,
        deer_candidates=deer_candidates, target=target, scorers=scorer_list, seed=seed, warmup=not no_warmup,
        settings={"model": model_name}, log=click.echo, token_budget=token_budget,
    )
    click.echo(f"\ncompute time for {result['target_queries']} queries x {result['entities']} entities "
               f"(paper: DEER 16 min, BEAR 330 days)")
    click.echo(f"{'method':<40}{'s/query':>11}{'total':>14}{'± se (fit)':>12}{'± runs':>12}{'vs DEER':>10}")
    for row in result["table"]:
        se_text, spread_text = ("-" if math.isnan(row[key]) else f"{row[key]:.3g} s"
                                for key in ("total_se_fit", "total_std_over_runs"))
        click.echo(f"{row['method']:<40}{row['time_per_query_s']:>11.3g}{row['total']:>14}{se_text:>12}"
                   f"{spread_text:>12}{row['speed_up_vs_deer']:>9.3g}x")
        click.echo(f"{'':<4}{row['basis']}")
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
