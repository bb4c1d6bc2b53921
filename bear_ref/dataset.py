"""The BEAR score over a data set in the lm-pub-quiz format (BEAR, BEAR-big).

For each relation, template and instance, every answer of the relation's answer space fills
[Y]; the instance is answered correctly when the gold answer's statement scores strictly
highest (summed log-likelihood of the whole statement; PLL for masked LMs).  A template's
statements (every instance x every answer) are scored together through a prefix trie
(``bear_ref.trie_scorer``): every distinct prefix is read once, whether [X] or [Y] comes first.

Results: a per-(instance, template) table, summary.md, and metrics: accuracy per template, the BEAR score
(mean over templates) and its spread (std over templates), per relation, per domain and per
cardinality, each with the random baseline (mean of 1/|answer space|).  Finished relations are
stored as parts in the output folder, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from bear_ref.statement_scorer import StatementScorer
from deer.cache import atomic_write_bytes, key_digest
from deer.outputs import default_table_suffix, package_versions, read_table, write_json, write_table
from kg_data.bear import BearDataset, BearRelation


def score_relation(scorer: StatementScorer, relation: BearRelation, progress: Optional[tqdm] = None) -> pd.DataFrame:
    """One row per (template, instance): gold score, prediction, realistic rank, correctness.

    All statements of a template (every instance x every answer) go to the scorer together, so
    whatever prefixes they share, whichever slot comes first, are read once.
    """
    rows = []
    n_answers = len(relation.answer_labels)
    for template_index, template in enumerate(relation.templates):
        statements = relation.statements(template)
        all_scores = scorer.score_statements(statements, progress.update if progress is not None else None)
        all_scores = all_scores.reshape(len(relation), n_answers)
        for i, (subject_id, subject) in enumerate(zip(relation.subject_ids, relation.subject_labels)):
            scores = all_scores[i]
            gold = int(relation.gold[i])
            higher = int(np.sum(scores > scores[gold]))
            ties = int(np.sum(scores == scores[gold])) - 1
            best = int(np.argmax(scores))
            rows.append(
                {
                    "relation": relation.code,
                    "template": template_index,
                    "row": int(relation.rows[i]),
                    "sub_id": subject_id,
                    "sub_label": subject,
                    "obj_id": relation.answer_ids[gold],
                    "obj_label": relation.answer_labels[gold],
                    "n_answers": n_answers,
                    "gold_score": float(scores[gold]),
                    "predicted_id": relation.answer_ids[best],
                    "predicted_label": relation.answer_labels[best],
                    "rank": 1 + higher + ties / 2,
                    "correct": higher == 0 and ties == 0,
                }
            )
    return pd.DataFrame(rows)


def _accuracy_block(frame: pd.DataFrame) -> dict:
    """Accuracy per template, their mean (BEAR score) and spread, and the random baseline."""
    per_template = frame.groupby("template")["correct"].mean()
    return {
        "instances": int(frame.groupby("template").size().max()) if len(frame) else 0,
        "accuracy_per_template": {int(t): float(a) for t, a in per_template.items()},
        "accuracy_mean": float(per_template.mean()) if len(per_template) else None,
        "accuracy_std": float(per_template.std(ddof=0)) if len(per_template) else None,
        "accuracy_min": float(per_template.min()) if len(per_template) else None,
        "accuracy_max": float(per_template.max()) if len(per_template) else None,
        "random_baseline": float((1.0 / frame["n_answers"]).mean()) if len(frame) else None,
        "mean_rank": float(frame["rank"].mean()) if len(frame) else None,
    }


def bear_metrics(table: pd.DataFrame, dataset: BearDataset) -> dict:
    """Overall, per-relation, per-domain and per-cardinality accuracy blocks."""
    domains = {code: relation.domains or ["unknown"] for code, relation in dataset.relations.items()}
    cardinality = {code: relation.cardinality for code, relation in dataset.relations.items()}
    # A relation with several domains counts in each of them (as lm-pub-quiz's accumulate does).
    by_domain = table.assign(domain=table["relation"].map(domains)).explode("domain")
    return {
        "overall": _accuracy_block(table),
        "per_relation": {
            code: {**_accuracy_block(part), "domains": domains[code], "cardinality": cardinality[code]}
            for code, part in table.groupby("relation", sort=True)
        },
        "per_domain": {domain: _accuracy_block(part) for domain, part in by_domain.groupby("domain", sort=True)},
        "per_cardinality": {c: _accuracy_block(part) for c, part in table.assign(cardinality=table["relation"].map(cardinality)).groupby("cardinality")},
        "cardinality_rule": "N:1 if some answer is the gold object of more than one subject in the full relation file, else 1:1",
    }


def summary_markdown(metrics: dict) -> str:
    """Markdown tables of a BEAR score: overall, per domain, per cardinality, per relation."""
    overall = metrics["overall"]
    templates = ", ".join(f"template {t}: {a:.3f}" for t, a in overall["accuracy_per_template"].items())
    lines = [
        f"BEAR score (mean accuracy over templates) **{overall['accuracy_mean']:.4f}**, spread (std over templates) "
        f"{overall['accuracy_std']:.4f}; {templates}; random baseline {overall['random_baseline']:.4f}; "
        f"{overall['instances']} instances.",
    ]
    for title, key in (("domain", "per_domain"), ("cardinality", "per_cardinality"), ("relation", "per_relation")):
        lines += ["", f"| {title} | accuracy | std over templates | random | instances |", "|---|---:|---:|---:|---:|"]
        for name, block in metrics[key].items():
            lines.append(f"| {name} | {block['accuracy_mean']:.3f} | {block['accuracy_std']:.3f} | "
                         f"{block['random_baseline']:.3f} | {block['instances']} |")
    return "\n".join(lines) + "\n"


def run_bear_dataset(
    dataset: BearDataset,
    loaded,
    out_dir: Path,
    selection: dict,
    token_budget: int = 512,
    pll_variant: str = "within_word_l2r",
    show_progress: bool = True,
) -> tuple[dict, dict]:
    """Score ``dataset``; write instances table, metrics.json, metadata.json; return (metrics, metadata).

    ``selection``: how the subset was chosen (relations, max_instances, seed), part of the resume key.
    """
    out_dir = Path(out_dir)
    scorer = StatementScorer(loaded.model, loaded.tokenizer, token_budget=token_budget, pll_variant=pll_variant)
    key = {"model": loaded.fingerprint, "dataset": dataset.path, "selection": selection, "method": scorer.statements_method}
    parts_dir = out_dir / "parts" / key_digest(key)
    parts_dir.mkdir(parents=True, exist_ok=True)
    (parts_dir / "key.json").write_text(json.dumps(key, indent=2, sort_keys=True))
    suffix = default_table_suffix()
    started = time.perf_counter()
    frames, resumed = [], []
    todo = []
    for code, relation in dataset.relations.items():
        part = parts_dir / f"{code}{suffix}"
        if part.exists():
            frames.append(read_table(part))
            resumed.append(code)
        else:
            todo.append(relation)
    total = sum(len(r) * len(r.answer_ids) * len(r.templates) for r in todo)
    with tqdm(total=total, desc="BEAR statements", unit="stmt", disable=not show_progress) as bar:
        for relation in todo:
            bar.set_postfix_str(relation.code)
            frame = score_relation(scorer, relation, bar)
            write_table(parts_dir / f"{relation.code}{suffix}", frame)  # atomic: a resumed run trusts it
            frames.append(frame)
    table = pd.concat(frames, ignore_index=True).sort_values(["relation", "template", "row"], ignore_index=True)
    metrics = bear_metrics(table, dataset)
    elapsed = time.perf_counter() - started
    metadata = {
        "probe": "bear-dataset",
        "model": loaded.metadata(),
        "dataset": dataset.summary(),
        "selection": selection,
        "scoring": scorer.statements_method,
        "statement_rule": "template with [X] filled and [Y] = each answer; first character capitalised; "
        "score = summed log-likelihood of the whole statement (every token after BOS), or its PLL",
        "relations_resumed": resumed,
        "work": {**scorer.work(), "statements_scored_now": total},
        "timings": {"seconds": round(elapsed, 3), "statements_per_second": total / elapsed if elapsed and total else None},
        "versions": package_versions(),
    }
    write_table(out_dir / f"instances{suffix}", table)
    write_json(out_dir / "metrics.json", {"bear": metrics})
    atomic_write_bytes(out_dir / "summary.md", summary_markdown(metrics).encode())
    write_json(out_dir / "metadata.json", {"bear": metadata})
    return metrics, metadata
