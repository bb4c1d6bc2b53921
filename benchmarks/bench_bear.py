"""Benchmark: BEAR on WN18RR, plain per-statement scoring vs bear_ref's shared-prefix scorer,
with the continuations packed side by side and in a candidate trie (both timed in one run).

Protocol (defaults): smollm2-135m, WN18RR test, the 500-triple subset with seed 0 (its
964 entities are the candidates), the first 20 of its queries, every candidate.  The plain
way (one full forward pass per whole statement, full LM head, as lm-pub-quiz) is measured on
a seeded sample of statements (--plain-sample) and its rate extrapolated; the sampled
statements double as an agreement check between the two.  Prints a table, writes JSON.

    nice -n 15 python benchmarks/bench_bear.py                       # full protocol (~10-20 min on 2 CPU cores)
    nice -n 15 python benchmarks/bench_bear.py --queries 2 --plain-sample 20   # smoke test
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import click
import numpy as np
import torch

from deer.backends.boundary import split_statements
from deer.backends.clm_scorer import SharedPrefixScorer
from deer.backends.models import open_model
from deer.backends.plain import plain_conditional_scores
from deer.base.files import package_versions, write_json
from deer.base.work import WorkCounter
from deer.platform.templates import PromptTemplates
from kg_data import build_queries, load_kg

LAYOUTS = SharedPrefixScorer.LAYOUTS
LAYOUT_NAMES = {"packed": "packed", "trie": "candidate trie"}
FULL_QUERIES, FULL_ENTITIES = 93_003, 40_943  # all WN18RR triples x all entities (the paper's extrapolation)


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--queries", "n_queries", default=20, show_default=True, help="Queries scored against every candidate.")
@click.option("--subset", default=500, show_default=True, help="Test triples sampled; their entities are the candidates.")
@click.option("--seed", default=0, show_default=True)
@click.option("--k-shot", default=8, show_default=True)
@click.option("--plain-sample", default=200, show_default=True, help="Statements scored the plain way (sampled, seeded).")
@click.option("--plain-batch-size", default=8, show_default=True)
@click.option("--token-budget", default=512, show_default=True)
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's choice).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="results/bench_bear.json", show_default=True)
def main(model_name, n_queries, subset, seed, k_shot, plain_sample, plain_batch_size, token_budget, threads, out_path):
    if threads:
        torch.set_num_threads(threads)
    kg = load_kg("wn18rr")
    queries = build_queries(kg, "test", subset, seed)
    templates = PromptTemplates(k_shot=k_shot, seed=seed)
    loaded = open_model(model_name)
    model, tokenizer = loaded.model, loaded.tokenizer
    triples = queries.triples[:n_queries].tolist()
    contexts = [templates.query_context(kg, tuple(t)) for t in triples]
    continuations = [templates.continuation(kg, t) for t in queries.candidates]
    n_candidates = len(continuations)

    # Whole-statement tokens (what the plain way reads) for all statements, from the split.
    splits = [split_statements(tokenizer, c, continuations) for c in contexts]
    statement_tokens = [[s + len(ids) for s, ids in zip(sp.shared_lengths, sp.continuation_ids, strict=True)] for sp in splits]
    clean = all(sp.clean for sp in splits)

    # Both layouts of the shared-prefix scorer on the same splits, query by query in alternating
    # order, so load changes on a shared machine hit both alike.
    scorers = {layout: SharedPrefixScorer(model, tokenizer, token_budget=token_budget, layout=layout) for layout in LAYOUTS}
    fast_seconds = dict.fromkeys(LAYOUTS, 0.0)
    fast_scores: dict[str, list] = {layout: [] for layout in LAYOUTS}
    for scorer in scorers.values():
        scorer.score_ids(splits[0].context_ids, splits[0].continuation_ids[:64])  # warm-up, not timed
        scorer.stats = type(scorer.stats)()
    for q, split in enumerate(splits):
        for layout in LAYOUTS if q % 2 == 0 else LAYOUTS[::-1]:
            started = time.perf_counter()
            fast_scores[layout].append(scorers[layout].score_split(split))
            fast_seconds[layout] += time.perf_counter() - started
    fast_scores = {layout: np.stack(rows) for layout, rows in fast_scores.items()}
    fast_statements = len(contexts) * n_candidates

    rng = np.random.default_rng(seed)
    sample = rng.choice(fast_statements, size=min(plain_sample, fast_statements), replace=False)
    by_query: dict[int, list[int]] = {}
    for flat in sorted(sample.tolist()):
        by_query.setdefault(flat // n_candidates, []).append(flat % n_candidates)
    plain_stats = WorkCounter()
    plain_scores, fast_sampled = [], []
    started = time.perf_counter()
    for q, cands in by_query.items():
        plain_scores += plain_conditional_scores(model, tokenizer, contexts[q], [continuations[c] for c in cands],
                                                 batch_size=plain_batch_size, stats=plain_stats).tolist()
        fast_sampled.append(np.stack([fast_scores[layout][q, cands] for layout in LAYOUTS], axis=1))
    plain_seconds = time.perf_counter() - started
    max_diff = dict(zip(LAYOUTS, np.abs(np.concatenate(fast_sampled) - np.asarray(plain_scores)[:, None]).max(axis=0).tolist(),
                        strict=True)) if plain_scores else dict.fromkeys(LAYOUTS)

    plain_rate = plain_stats.statements / plain_seconds
    all_plain_tokens = int(sum(map(sum, statement_tokens)))
    full_statements = FULL_QUERIES * FULL_ENTITIES
    rows = [
        {
            "method": "plain (one pass per statement)",
            "statements_measured": plain_stats.statements,
            "measured_on": f"random sample of {plain_stats.statements} of the {fast_statements} statements",
            "seconds": plain_seconds,
            "statements_per_second": plain_rate,
            "tokens_through_model": plain_stats.tokens,
            "padded_tokens": plain_stats.padded_tokens,
            "tokens_per_statement": plain_stats.tokens / max(plain_stats.statements, 1),
            "tokens_per_second": plain_stats.tokens / plain_seconds,
            "tokens_all_statements_plain": all_plain_tokens,
            "extrapolated_full_days": full_statements / plain_rate / 86400,
        },
    ]
    for layout, scorer in scorers.items():
        seconds, stats = fast_seconds[layout], scorer.stats
        rows.append({
            "method": f"bear_ref (shared prefix, {LAYOUT_NAMES[layout]})",
            "layout": layout,
            "statements_measured": fast_statements,
            "measured_on": f"all {len(contexts)} queries x {n_candidates} candidates",
            "seconds": seconds,
            "seconds_per_query": seconds / len(contexts),
            "statements_per_second": fast_statements / seconds,
            "tokens_through_model": stats.tokens,
            "tokens_per_query": stats.tokens / len(contexts),
            "padded_tokens": stats.padded_tokens + stats.context_tokens,
            "tokens_per_statement": stats.tokens / fast_statements,
            "tokens_per_second": stats.tokens / seconds,
            "context_tokens": stats.context_tokens,
            "continuation_tokens": stats.continuation_tokens,
            "trie_nodes": stats.trie_nodes,
            "max_abs_score_difference_to_plain_on_sample": max_diff[layout],
            "extrapolated_full_days": full_statements / (fast_statements / seconds) / 86400,
        })
    packed, trie = rows[1], rows[2]
    default_layout = SharedPrefixScorer(model, tokenizer).layout
    default = rows[1 + LAYOUTS.index(default_layout)]
    result = {
        "benchmark": "bear-wn18rr",
        "model": loaded.metadata(),
        "protocol": {"split": "test", "subset": subset, "seed": seed, "queries": len(contexts), "candidates": n_candidates,
                     "k_shot": k_shot, "token_budget": token_budget, "plain_batch_size": plain_batch_size,
                     "boundary_clean_for_all_statements": clean},
        "rows": rows,
        "default_layout": default_layout,
        "speedup_statements_per_second": default["statements_per_second"] / plain_rate,
        "token_reduction": all_plain_tokens / max(default["tokens_through_model"], 1),
        "max_abs_score_difference_on_sample": max_diff[default_layout],
        "candidate_trie_vs_packed": {
            "tokens_per_query": {"packed": packed["tokens_per_query"], "trie": trie["tokens_per_query"]},
            "seconds_per_query": {"packed": packed["seconds_per_query"], "trie": trie["seconds_per_query"]},
            "speedup": packed["seconds"] / trie["seconds"],
            "max_abs_score_difference": float(np.abs(fast_scores["packed"] - fast_scores["trie"]).max()),
        },
        "extrapolation": {"queries": FULL_QUERIES, "entities": FULL_ENTITIES, "statements": full_statements,
                          "note": "linear in statements at the measured rate; full-size queries amortise the query "
                                  "prefix over 40,943 candidates, so bear_ref's real rate would be a little higher"},
        "machine": {"platform": platform.platform(), "torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()},
        "versions": package_versions(),
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(out_path), result)

    click.echo(f"BEAR on WN18RR test (subset {subset}, seed {seed}): {len(contexts)} queries x {n_candidates} candidates, "
               f"{model_name}, k_shot={k_shot}")
    header = f"{'method':<44}{'stmts':>8}{'seconds':>9}{'stmt/s':>9}{'tokens':>11}{'tok/stmt':>10}{'tok/s':>8}{'full (days)':>13}"
    click.echo(header)
    click.echo("-" * len(header))
    for row in rows:
        click.echo(f"{row['method']:<44}{row['statements_measured']:>8}{row['seconds']:>9.1f}{row['statements_per_second']:>9.1f}"
                   f"{row['tokens_through_model']:>11}{row['tokens_per_statement']:>10.1f}{row['tokens_per_second']:>8.0f}"
                   f"{row['extrapolated_full_days']:>13.1f}")
    click.echo(f"plain measured on {rows[0]['measured_on']}")
    versus = result["candidate_trie_vs_packed"]
    click.echo(f"candidate trie vs packed: {packed['tokens_per_query']:.0f} -> {trie['tokens_per_query']:.0f} tokens/query "
               f"({trie['trie_nodes']} trie nodes fed for {trie['continuation_tokens']} continuation tokens), "
               f"{packed['seconds_per_query']:.2f} -> {trie['seconds_per_query']:.2f} s/query ({versus['speedup']:.2f}x); "
               f"max |packed - trie| {versus['max_abs_score_difference']:.2e} nats")
    click.echo(f"default layout {default_layout}: speed-up {result['speedup_statements_per_second']:.1f}x in statements/s; "
               f"{result['token_reduction']:.1f}x fewer tokens than plain for all {fast_statements} statements "
               f"({all_plain_tokens} vs {default['tokens_through_model']})")
    click.echo("max |plain - bear_ref| on the sample: " + ", ".join(f"{k} {v:.2e}" for k, v in max_diff.items() if v is not None)
               + f" nats; extrapolation to {FULL_QUERIES} x {FULL_ENTITIES} = {full_statements:.3g} statements")
    click.echo(f"load average during the run (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    click.echo(f"JSON: {out_path}")


if __name__ == "__main__":
    main()
