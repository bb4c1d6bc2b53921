"""Fine-tune a tiny causal LM for a few steps with the HF Trainer and DeerCallback (used by
tests/test_training_callback.py, in-process and under ``torch.distributed.run`` with 2 processes).

    python tests/train_with_callback.py MODEL_DIR KG_DIR OUT_DIR [--steps N] [--every N] [--select-best]

Writes OUT_DIR/final (the trained model and tokenizer) and OUT_DIR/report.json (process 0): the
DEER entries and the loss entries of the Trainer's log history, and each process's count of
encoded prompts.  ``--every 0``: no callback.  ``--select-best``: evaluate and save every 2 steps
and keep the checkpoint with the best DEER MRR (``metric_for_best_model="deer/mrr"``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

from deer.integrations import DeerCallback
from deer.platform.distributed import world
from experiments.training_demo import line_dataset, triple_lines
from kg_data.load import load_kg
from kg_data.queries import build_queries


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("kg_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--select-best", action="store_true")
    options = parser.parse_args(argv)
    out = Path(options.out_dir)
    tokenizer = AutoTokenizer.from_pretrained(options.model_dir)
    model = AutoModelForCausalLM.from_pretrained(options.model_dir, dtype=torch.float32)
    kg = load_kg(options.kg_dir)
    distributed = "LOCAL_RANK" in os.environ  # started by torch.distributed.run
    selection = dict(eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2, load_best_model_at_end=True,
                     metric_for_best_model="deer/mrr", greater_is_better=True) if options.select_best else dict(save_strategy="no")
    args = TrainingArguments(output_dir=str(out / "trainer"), max_steps=options.steps, per_device_train_batch_size=2,
                             learning_rate=5e-3, logging_steps=1, report_to=[], use_cpu=True, seed=0, **selection,
                             ddp_backend="gloo" if distributed else None, dataloader_num_workers=0, disable_tqdm=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train = line_dataset(triple_lines(build_queries(kg, "train")), tokenizer)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=train if options.select_best else None,
                      processing_class=tokenizer, data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    callback = DeerCallback.attach(trainer, build_queries(kg, "test"), every_n_steps=options.every) if options.every else None
    trainer.train()
    rank, world_size = world()
    prompts = {step: int(result.metadata["work"]["prompts"]) for step, result in callback.results.items()} if callback else {}
    counts = [None] * world_size
    if world_size > 1:
        torch.distributed.all_gather_object(counts, prompts)
    else:
        counts = [prompts]
    trainer.save_model(str(out / "final"))  # every process calls it; the Trainer writes on process 0
    if rank == 0:
        tokenizer.save_pretrained(str(out / "final"))
        history = trainer.state.log_history
        entries = [e for e in history if any(k.startswith("deer/") for k in e)]
        (out / "report.json").write_text(json.dumps({
            "world_size": world_size, "deer_logs": entries, "prompts_per_process": counts, "model_training_after": model.training,
            "loss_logs": [{"step": e["step"], "loss": e["loss"]} for e in history if "loss" in e],
            "eval_logs": [e for e in history if "eval_loss" in e],
            "best_metric": trainer.state.best_metric, "best_model_checkpoint": trainer.state.best_model_checkpoint}))
    if world_size > 1:
        # Every process waits for process 0's files, then leaves the group: a process that exits with
        # gloo's threads still running aborts ("terminate called without an active exception", exit -6).
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    import faulthandler

    # As a script (one process of torch.distributed.run): a hang shows where each process waits, then
    # ends.  Not armed when a test calls main() in its own process, whose later tests it would kill.
    faulthandler.dump_traceback_later(90, exit=True)
    main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torch.distributed.run
        # The process group is destroyed, every file written: leave without the interpreter's finalisation, in
        # which gloo's worker threads can still abort the process now and then ("terminate called without an
        # active exception", exit -6; seen once in a fresh-clone CI run after the barrier and destroy above).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
