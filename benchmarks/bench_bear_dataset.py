"""Benchmark: the BEAR data set, plain per-statement scoring vs bear_ref's prefix trie.

Two parts, one JSON:

1. Work, exact and machine-independent (tokenizer only, no forward pass): over the whole data
   set (or --count-relations), the tokens the plain way reads (every token of every
   statement, as lm-pub-quiz) and the trie nodes bear_ref feeds through the model, per
   template form ([Y] after [X], or [Y] first).
2. Time, on a small subset (--relations, --max-instances): bear_ref scores every statement of
   the subset; the plain way (one full forward pass per whole statement, full LM head) scores
   a seeded sample of them, which doubles as the agreement check; and lm-pub-quiz 0.3.3 itself
   (a test extra) evaluates the same subset, written to a temporary folder in its format, with
   the same model object, at each --lm-pub-quiz-batch-sizes (its own default is 1): its time
   around ``Evaluator.evaluate_dataset``, its predictions and scores against bear_ref's.

    nice -n 15 python benchmarks/bench_bear_dataset.py                                  # ~5 min on 2 CPU cores
    nice -n 15 python benchmarks/bench_bear_dataset.py --max-instances 2 --plain-sample 10   # smoke test
"""

from __future__ import annotations

import collections
import copy
import platform
import tempfile
import time
from pathlib import Path

import click
import numpy as np
import torch

from deer.backends.models import open_model
from deer.backends.plain import plain_conditional_scores
from deer.backends.tokenization import batch_token_ids
from deer.backends.trie_scorer import PrefixTrieScorer, build_rows
from deer.base.files import package_versions, write_json
from deer.base.work import WorkCounter
from deer.platform.tables import text_table
from kg_data.bear import ANSWER, SUBJECT, BearDataset, load_bear_dataset, save_lm_pub_quiz_folder

# The printed tables (deer.platform.tables.text_table): (title, format spec[, key[, text]]).
WORK_COLUMNS = [("template form", "<16", "form"), ("templates", ">10"), ("statements", ">12"),
                ("plain tokens", ">14", "plain_tokens"), ("trie tokens", ">13", "trie_tokens"),
                ("reduction", ">11", "token_reduction", lambda v: f"{v:.2f}x")]
TIMING_COLUMNS = [("method", "<32"), ("stmts", ">7", "statements"), ("seconds", ">9.1f"),
                  ("stmt/s", ">9.1f", "statements_per_second"), ("tokens", ">9", "tokens_through_model"),
                  ("full set (h)", ">14.1f", "full_dataset_hours")]


def template_statements(dataset: BearDataset):
    """(relation code, template, its statements) for every template of every relation."""
    for code, relation in dataset.relations.items():
        for template in relation.templates:
            yield code, template, relation.statements(template)


def count_work(dataset: BearDataset, tokenizer, token_budget: int) -> dict:
    """Statements, plain tokens and trie-fed tokens, per template form and in total."""
    totals = collections.defaultdict(lambda: collections.Counter())
    for _, template, statements in template_statements(dataset):
        form = "answer_first" if template.index(ANSWER) < template.index(SUBJECT) else "subject_first"
        sequences = batch_token_ids(tokenizer, statements)
        fed = sum(len(row.fed_nodes()) for row in build_rows(sequences, token_budget))
        for key in (form, "all"):
            totals[key].update({"templates": 1, "statements": len(statements),
                                "plain_tokens": sum(map(len, sequences)), "trie_tokens": fed})
    return {key: {**totals[key], "token_reduction": totals[key]["plain_tokens"] / max(totals[key]["trie_tokens"], 1)}
            for key in sorted(totals, key=lambda k: k == "all")}


def run_lm_pub_quiz(subset: BearDataset, loaded, batch_size: int) -> tuple[float, np.ndarray]:
    """lm-pub-quiz 0.3.3 on ``subset`` with the loaded model: (seconds in evaluate_dataset, every
    statement's score in ``template_statements`` order)."""
    import lm_pub_quiz

    # lm-pub-quiz pads each instance's statements together: padded on the left (gemma3-270m's tokenizer), they move
    # to later positions and gain a second, scored BOS, so it runs on a right-padding copy (the loaded one untouched).
    tokenizer = copy.deepcopy(loaded.tokenizer)
    tokenizer.padding_side = "right"
    with tempfile.TemporaryDirectory() as work:
        folder = save_lm_pub_quiz_folder(subset, Path(work) / "subset")
        dataset = lm_pub_quiz.Dataset.from_path(folder, relation_info=folder / "relation_info.json")
        evaluator = lm_pub_quiz.Evaluator.from_model(loaded.model, model_type="CLM", tokenizer=tokenizer,
                                                     device=str(next(loaded.model.parameters()).device))
        started = time.perf_counter()
        results = evaluator.evaluate_dataset(dataset, batch_size=batch_size)
        seconds = time.perf_counter() - started
    scores = {}
    for relation in results:
        for _, row in relation.instance_table.iterrows():
            scores[(relation.relation_code, int(row["template_index"]), int(row["instance_index"]))] = list(row["pll_scores"])
    ordered = [scores[(code, t, i)] for code, relation in subset.relations.items()
               for t in range(len(relation.templates)) for i in range(len(relation))]
    return seconds, np.asarray([s for row in ordered for s in row], dtype=np.float64)


def predictions(subset: BearDataset, scores: np.ndarray) -> np.ndarray:
    """The first best answer per (relation, template, instance), in ``template_statements`` order."""
    out, start = [], 0
    for relation in subset.relations.values():
        n = len(relation) * len(relation.answer_ids)
        for _ in relation.templates:
            out.extend(np.argmax(scores[start:start + n].reshape(len(relation), -1), axis=1).tolist())
            start += n
    return np.asarray(out)


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--dataset", "dataset_name", default="bear", show_default=True)
@click.option("--relations", default="P6,P36", show_default=True, help="Relations of the timed subset.")
@click.option("--max-instances", default=10, show_default=True, help="Instances per relation in the timed subset.")
@click.option("--count-relations", default=None, help="Relations for the work count (default: all).")
@click.option("--plain-sample", default=100, show_default=True, help="Statements scored the plain way (sampled, seeded).")
@click.option("--plain-batch-size", default=8, show_default=True)
@click.option("--token-budget", default=512, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's choice).")
@click.option("--lm-pub-quiz-batch-sizes", default="1,16", show_default=True,
              help="Batch sizes to run lm-pub-quiz 0.3.3 at on the timed subset ('' skips it).")
@click.option("--count-only", is_flag=True, help="Only the exact work count (no forward pass, ~1 min).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="results/bench_bear_dataset.json", show_default=True)
def main(model_name, dataset_name, relations, max_instances, count_relations, plain_sample, plain_batch_size, token_budget, seed, threads,
         lm_pub_quiz_batch_sizes, count_only, out_path):
    if threads:
        torch.set_num_threads(threads)
    loaded = open_model(model_name)
    model, tokenizer = loaded.model, loaded.tokenizer
    full = load_bear_dataset(dataset_name, relations=count_relations.split(",") if count_relations else None)
    work = count_work(full, tokenizer, token_budget)
    click.echo(f"Work over {full.n_statements} statements of {dataset_name} ({model_name} tokenizer, exact counts):")
    click.echo(text_table([{"form": form, **counts} for form, counts in work.items()], WORK_COLUMNS))
    result = {
        "benchmark": "bear-dataset",
        "model": loaded.metadata(),
        "work_full_count": {"dataset": full.summary(), "token_budget": token_budget, "by_template_form": work},
        "machine": {"platform": platform.platform(), "torch_threads": torch.get_num_threads()},
        "versions": package_versions(),
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    if count_only:
        write_json(Path(out_path), result)
        click.echo(f"JSON: {out_path}")
        return

    subset = load_bear_dataset(dataset_name, relations=relations.split(","), max_instances=max_instances, seed=seed)
    statements = [s for _, _, batch in template_statements(subset) for s in batch]
    scorer = PrefixTrieScorer(model, tokenizer, token_budget=token_budget)
    scorer.score_texts(statements[:8])  # warm-up, not timed
    scorer.stats = type(scorer.stats)()
    started = time.perf_counter()
    trie_scores = np.concatenate([scorer.score_texts(batch) for _, _, batch in template_statements(subset)])
    trie_seconds = time.perf_counter() - started

    sample = np.sort(np.random.default_rng(seed).choice(len(statements), size=min(plain_sample, len(statements)), replace=False))
    plain_stats = WorkCounter()
    started = time.perf_counter()
    plain_scores = plain_conditional_scores(model, tokenizer, "", [statements[i] for i in sample],
                                            batch_size=plain_batch_size, stats=plain_stats)
    plain_seconds = time.perf_counter() - started
    max_diff = float(np.max(np.abs(plain_scores - trie_scores[sample])))

    plain_rate, trie_rate = len(sample) / plain_seconds, len(statements) / trie_seconds
    rows = [
        {"method": "plain (one pass per statement)", "statements": len(sample), "seconds": plain_seconds,
         "statements_per_second": plain_rate, "tokens_through_model": plain_stats.tokens,
         "padded_tokens": plain_stats.padded_tokens, "full_dataset_hours": work["all"]["statements"] / plain_rate / 3600},
        {"method": "bear_ref (prefix trie)", "statements": len(statements), "seconds": trie_seconds,
         "statements_per_second": trie_rate, "tokens_through_model": scorer.stats.fed_tokens,
         "padded_tokens": scorer.stats.fed_tokens, "full_dataset_hours": work["all"]["statements"] / trie_rate / 3600},
    ]
    trie_predictions = predictions(subset, trie_scores)
    statement_tokens = sum(map(len, batch_token_ids(tokenizer, statements)))  # lm-pub-quiz reads each statement whole
    for batch_size in [int(b) for b in lm_pub_quiz_batch_sizes.split(",") if b.strip()]:
        peer_seconds, peer_scores = run_lm_pub_quiz(subset, loaded, batch_size)
        peer_rate = len(statements) / peer_seconds
        rows.append({"method": f"lm-pub-quiz 0.3.3 (batch size {batch_size})", "statements": len(statements), "seconds": peer_seconds,
                     "statements_per_second": peer_rate, "tokens_through_model": statement_tokens,
                     "padded_tokens": None, "full_dataset_hours": work["all"]["statements"] / peer_rate / 3600,
                     "bear_ref_speedup": trie_rate / peer_rate,
                     "max_abs_score_difference": float(np.max(np.abs(peer_scores - trie_scores))),
                     "same_predictions": int((predictions(subset, peer_scores) == trie_predictions).sum()),
                     "predictions": len(trie_predictions)})
    result.update({
        "timed_subset": {"relations": relations, "max_instances": max_instances, "seed": seed,
                         "statements": len(statements), "plain_sample": len(sample)},
        "rows": rows,
        "speedup_statements_per_second": trie_rate / plain_rate,
        "max_abs_score_difference_on_sample": max_diff,
        "note": "full_dataset_hours: all statements of the counted data set at the rate measured on the subset",
    })
    write_json(Path(out_path), result)
    click.echo(f"\nTimed on {relations} x {max_instances} instances ({len(statements)} statements, "
               f"{torch.get_num_threads()} torch threads):")
    click.echo(text_table(rows, TIMING_COLUMNS))
    click.echo(f"speed-up {result['speedup_statements_per_second']:.1f}x in statements/s; "
               f"max |plain - trie| on the sample {max_diff:.2e} nats")
    for row in rows[2:]:
        click.echo(f"{row['method']}: bear_ref {row['bear_ref_speedup']:.1f}x its statements/s; same prediction in "
                   f"{row['same_predictions']}/{row['predictions']} (relation, template, instance); "
                   f"max |lm-pub-quiz - trie| {row['max_abs_score_difference']:.2e} nats")
    click.echo(f"JSON: {out_path}")


if __name__ == "__main__":
    main()
