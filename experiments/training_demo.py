"""Probing while training, demonstrated: fine-tune a causal LM with the Hugging Face Trainer on the lines
``(head, relation, tail)`` of ``n_queries`` sampled train triples, while two ``DeerCallback``s probe (at
the start and every ``every`` steps) the *seen* set (those triples) and the *held-out* set (``n_queries``
test triples).  At the end BEAR probes the held-out set once, for the cost ratio of the two probes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from deer.backends.models import open_model
from deer.integrations.training import DeerCallback, probe_during_training
from deer.platform.templates import PromptTemplates
from experiments import plots
from experiments.report import ExperimentOutput
from kg_data.load import load_kg
from kg_data.queries import build_queries

SETS = ("seen", "heldout")


def triple_lines(queries) -> list[str]:
    """The training text: one ``(head, relation, tail)`` line per query triple."""
    return [PromptTemplates.example_line(queries.kg, *triple) for triple in queries.triples.tolist()]


def line_dataset(lines: list[str], tokenizer) -> list[dict]:
    """Tokenised lines, a causal-LM Trainer's dataset (with ``DataCollatorForLanguageModeling(tokenizer, mlm=False)``)."""
    return [{"input_ids": tokenizer(line + "\n")["input_ids"]} for line in lines]


def run_training_demo(out_dir: Path, model: str = "smollm2-135m", kg: str = "wn18rr", n_queries: int = 50, steps: int = 200,
                      every: int = 25, batch_size: int = 8, learning_rate: float = 1e-4, seed: int = 0, data_dir=None,
                      bear: bool = True) -> dict:
    """Train, probe both sets every ``every`` steps; write curves.csv/.md, curves.png, training_demo.json."""
    import tempfile

    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    output = ExperimentOutput(out_dir, "training_demo")
    graph = load_kg(kg, data_dir)
    query_sets = {"seen": build_queries(graph, "train", subset=n_queries, seed=seed),
                  "heldout": build_queries(graph, "test", subset=n_queries, seed=seed)}
    loaded = open_model(model, dtype="float32")
    templates = PromptTemplates(seed=seed)  # the few-shot examples follow seed, as deer.probe(kg, subset=n, seed=...) has them
    tokenizer = loaded.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    scratch = tempfile.TemporaryDirectory()  # the Trainer's output folder: nothing is saved there (save_strategy="no")
    args = TrainingArguments(output_dir=scratch.name, max_steps=steps, per_device_train_batch_size=batch_size,
                             learning_rate=learning_rate, logging_steps=max(1, every // 5), report_to=[], use_cpu=True,
                             save_strategy="no", seed=seed, disable_tqdm=True, lr_scheduler_type="constant")
    trainer = Trainer(model=loaded.model, args=args, train_dataset=line_dataset(triple_lines(query_sets["seen"]), tokenizer),
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), processing_class=tokenizer)
    callbacks = {name: DeerCallback.attach(trainer, queries, every_n_steps=every, at_start=True, prefix=f"deer_{name}",
                                           out=out_dir / "probes" / name, templates=templates)
                 for name, queries in query_sets.items()}
    loaded.model.train()
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    scratch.cleanup()

    rows = [{"set": name, "step": step, "queries": len(result.table),
             **{metric: result.metrics[metric] for metric in ("hit@1", "hit@10", "mrr", "mr")},
             "probe_seconds": callback.seconds[step]}
            for name, callback in callbacks.items() for step, result in sorted(callback.results.items())]
    table = pd.DataFrame(rows)
    output.table("curves", table, note=f"DEER (filtered ranks) while fine-tuning {model} on the seen set's {n_queries} triple "
                                       f"lines; probe_seconds: the callback's wall time for that evaluation.")
    steps_list = sorted(table["step"].unique().tolist())
    series = {f"{metric} | {name}": table[table["set"] == name].sort_values("step")[metric].tolist()
              for metric in ("hit@10", "mrr") for name in SETS}
    output.figure("curves", lambda: plots.metric_curves(steps_list, series, f"DEER while fine-tuning {model}"))

    probe_seconds = float(table["probe_seconds"].sum())
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    result = {
        "experiment": "training_demo",
        "settings": {"model": model, "kg": graph.name, "n_queries": n_queries, "steps": steps, "every": every,
                     "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed,
                     "train_lines": len(query_sets["seen"]), "example_line": triple_lines(query_sets["seen"])[0]},
        "rows": rows, "loss_first_last": [losses[0], losses[-1]] if losses else None,
        "wall_seconds": wall, "probe_seconds_total": probe_seconds, "train_seconds_per_step": (wall - probe_seconds) / steps,
        "probe_seconds_per_evaluation": {name: float(table[table["set"] == name]["probe_seconds"].mean()) for name in SETS},
    }
    if bear:  # BEAR on the held-out set with the final weights, against one callback evaluation of it
        import bear_ref

        loaded.model.eval()
        started = time.perf_counter()
        reference = bear_ref.bear(query_sets["heldout"], (loaded.model, tokenizer), templates=templates, show_progress=False)
        bear_seconds = time.perf_counter() - started
        final = callbacks["heldout"].results[max(callbacks["heldout"].results)]
        started = time.perf_counter()
        again = probe_during_training(loaded.model, tokenizer, query_sets["heldout"], templates)
        deer_seconds = time.perf_counter() - started
        result["bear_heldout"] = {"seconds": bear_seconds, "deer_seconds_same_weights": deer_seconds,
                                  "bear_over_deer": bear_seconds / deer_seconds, "bear_hit@10": reference.metrics["hit@10"],
                                  "bear_mrr": reference.metrics["mrr"], "deer_hit@10": again.metrics["hit@10"],
                                  "deer_hit@10_logged_at_last_step": final.metrics["hit@10"]}
    return output.finish(result)
