"""lm-evaluation-harness 0.4.13's ``bear`` task beside ``deer bear-dataset`` (issue 23): the same relations,
templates and model, every statement's score, the predictions, the accuracy per relation and the
scoring time, in one run.

lm-eval is installed apart (``bash scripts/install_lm_eval_peer.sh``: a venv in .peers/lm-eval-venv, the
default ``--peer-python``) and runs in a subprocess (``lm_eval_peer.py``) on a local copy of its ``bear`` task: the hub is not reachable,
so the chosen relations of the local BEAR folder are written in the task's layout (one document per
instance and template: ``text_options``, the statement with each answer; ``correct``, the gold's index).

Timed on each side: lm-eval's ``simple_evaluate`` (model loaded before); this toolkit's
``bear_ref.bear_dataset`` (the ``deer bear-dataset`` call, metrics included).  Every statement's score
comes from this toolkit's prefix-trie scorer (what ``bear_dataset`` runs) for the comparison.

    bash scripts/install_lm_eval_peer.sh && python benchmarks/bench_lm_eval.py --relations P30,P36 --out results/bench_lm_eval.json
"""

from __future__ import annotations

import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import click
import numpy as np
import torch
from bench_bear_dataset import predictions, template_statements  # run as a script: benchmarks/ is on sys.path

import bear_ref
from deer.backends.models import open_model
from deer.backends.tokenization import batch_token_ids
from deer.backends.trie_scorer import PrefixTrieScorer
from deer.base.files import package_versions, write_json
from kg_data.bear import BearDataset, load_bear_dataset

TASK_YAML = """task: bear_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: ""
doc_to_target: correct
doc_to_choice: text_options
target_delimiter: ""
should_decontaminate: false
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def write_task(subset: BearDataset, folder: Path) -> list[tuple[str, int]]:
    """lm-eval's ``bear`` task over ``subset`` in ``folder``; returns each document's (relation, gold index)."""
    folder.mkdir(parents=True, exist_ok=True)
    docs, keys = [], []
    for code, _, statements in template_statements(subset):
        relation = subset.relations[code]
        width = len(relation.answer_ids)
        for i, gold in enumerate(relation.gold):
            docs.append({"text_options": statements[i * width:(i + 1) * width], "correct": int(gold)})
            keys.append((code, int(gold)))
    (folder / "bear_local.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    (folder / "bear_local.yaml").write_text(TASK_YAML.format(data=folder / "bear_local.jsonl"), encoding="utf-8")
    return keys


def per_relation_accuracy(keys, predicted) -> dict[str, float]:
    by_relation: dict[str, list[bool]] = {}
    for (code, gold), guess in zip(keys, predicted, strict=True):
        by_relation.setdefault(code, []).append(int(guess) == gold)
    return {code: float(np.mean(hits)) for code, hits in by_relation.items()}


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--dataset", "dataset_name", default="bear", show_default=True)
@click.option("--relations", default="P30,P36", show_default=True)
@click.option("--max-instances", type=int, default=None, help="Instances per relation (default: all).")
@click.option("--batch-size", default="32", show_default=True, help="lm-eval's batch size.")
@click.option("--peer-python", default=".peers/lm-eval-venv/bin/python", show_default=True,
              help="The interpreter of the environment lm-eval 0.4.13 is installed in.")
@click.option("--out", "out_path", default="results/bench_lm_eval.json", show_default=True)
def main(model_name, dataset_name, relations, max_instances, batch_size, peer_python, out_path):
    loaded = open_model(model_name, dtype="float32", device="cpu")
    subset = load_bear_dataset(dataset_name, relations=relations.split(","), max_instances=max_instances)
    statements = [s for _, _, batch in template_statements(subset) for s in batch]

    started = time.perf_counter()
    ours = bear_ref.bear_dataset(subset, loaded, show_progress=False)
    our_seconds = time.perf_counter() - started
    scorer = PrefixTrieScorer(loaded.model, loaded.tokenizer)
    trie_scores = np.concatenate([scorer.score_texts(batch) for _, _, batch in template_statements(subset)])

    with tempfile.TemporaryDirectory() as work:
        keys = write_task(subset, Path(work) / "task")
        peer_out = Path(work) / "peer.json"
        done = subprocess.run([peer_python, str(Path(__file__).with_name("lm_eval_peer.py")), "--model", loaded.source,
                               "--task-dir", str(Path(work) / "task"), "--batch-size", batch_size, "--out", str(peer_out)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise click.ClickException(f"lm-eval failed:\n{done.stderr[-3000:]}")
        peer = json.loads(peer_out.read_text())
    peer_scores = np.asarray([s for row in peer["option_loglikelihoods"] for s in row], dtype=np.float64)
    ours_predicted, peer_predicted = predictions(subset, trie_scores), predictions(subset, peer_scores)
    plain_tokens = sum(len(ids) for ids in batch_token_ids(loaded.tokenizer, statements))  # BOS + statement, whole
    report = {
        "benchmark": "lm-eval 0.4.13 bear vs deer bear-dataset",
        "model": loaded.metadata(),
        "relations": relations.split(","), "max_instances": max_instances, "documents": len(keys), "statements": len(statements),
        "lm_eval": {"seconds": peer["seconds"], "batch_size": batch_size, "accuracy": peer["accuracy"],
                    "prefix_token_id": peer["prefix_token_id"], "tokens_through_model": plain_tokens,
                    "accuracy_per_relation": per_relation_accuracy(keys, peer_predicted)},
        "deer_bear_dataset": {"seconds": our_seconds, "bear_score": ours.metrics["accuracy_mean"],
                              "tokens_through_model": scorer.stats.fed_tokens,
                              "accuracy_per_relation": per_relation_accuracy(keys, ours_predicted)},
        "speedup": peer["seconds"] / our_seconds,
        "same_predictions": int(np.sum(ours_predicted == peer_predicted)),
        "max_abs_score_difference": float(np.max(np.abs(peer_scores - trie_scores))),
        "bos_token_id": loaded.tokenizer.bos_token_id,
        "machine": {"platform": platform.platform(), "torch_threads": torch.get_num_threads()},
        "versions": package_versions(),
    }
    write_json(Path(out_path), report)
    click.echo(f"{len(keys)} documents ({', '.join(report['relations'])}), {len(statements)} statements, {model_name} float32 on the CPU")
    click.echo(f"{'':<22}{'seconds':>9}{'tokens fed':>12}{'accuracy':>10}")
    click.echo(f"{'lm-eval 0.4.13 bear':<22}{peer['seconds']:>9.1f}{plain_tokens:>12}{peer['accuracy']:>10.4f}")
    ours_accuracy = float(np.mean([p == g for p, (_, g) in zip(ours_predicted, keys, strict=True)]))
    click.echo(f"{'deer bear-dataset':<22}{our_seconds:>9.1f}{scorer.stats.fed_tokens:>12}{ours_accuracy:>10.4f}")
    click.echo(f"speed-up {report['speedup']:.1f}x; same prediction in {report['same_predictions']}/{len(keys)} documents; "
               f"max |lm-eval - deer| {report['max_abs_score_difference']:.2e} nats; lm-eval's prefix token "
               f"{peer['prefix_token_id']}, BOS {report['bos_token_id']}")
    click.echo(f"JSON: {out_path}")


if __name__ == "__main__":
    main()
