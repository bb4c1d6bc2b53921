"""Fine-tune a tiny causal LM for a few steps with the HF Trainer and DeerCallback (used by
tests/test_training_callback.py, in-process and under ``torch.distributed.run`` with 2 processes).

    python tests/train_with_callback.py MODEL_DIR KG_DIR OUT_DIR [--steps N] [--every N]

Writes OUT_DIR/final (the trained model and tokenizer) and OUT_DIR/report.json (process 0): the
DEER entries of the Trainer's log history, and each process's count of encoded prompts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

from deer.core.distributed import world
from deer.integrations import DeerCallback
from kg_data.load import load_kg
from kg_data.queries import build_queries


class TripleLines(torch.utils.data.Dataset):
    """'(head, relation, tail)' lines of a KG split, tokenised, as causal-LM examples."""

    def __init__(self, kg, split, tokenizer, length=24):
        lines = [f"({kg.entity_names[h]}, {kg.relation_names[r]}, {kg.entity_names[t]})" for h, r, t in kg.triples(split).tolist()]
        self.items = []
        for line in lines:
            ids = tokenizer(line, truncation=True, max_length=length)["input_ids"]
            ids = ids + [tokenizer.eos_token_id] * (length - len(ids))
            self.items.append({"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def main(argv=None):
    import faulthandler

    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where each process waits, then ends
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("kg_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--every", type=int, default=2)
    options = parser.parse_args(argv)
    out = Path(options.out_dir)
    tokenizer = AutoTokenizer.from_pretrained(options.model_dir)
    model = AutoModelForCausalLM.from_pretrained(options.model_dir, dtype=torch.float32)
    kg = load_kg(options.kg_dir)
    distributed = world()[1] > 1 or "LOCAL_RANK" in __import__("os").environ
    args = TrainingArguments(output_dir=str(out / "trainer"), max_steps=options.steps, per_device_train_batch_size=2,
                             learning_rate=5e-3, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", seed=0,
                             ddp_backend="gloo" if distributed else None, dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=TripleLines(kg, "train", tokenizer), processing_class=tokenizer)
    callback = DeerCallback.attach(trainer, build_queries(kg, "test"), every_n_steps=options.every)
    trainer.train()
    rank, world_size = world()
    prompts = {step: int(result.metadata["work"]["prompts"]) for step, result in callback.results.items()}
    counts = [None] * world_size
    if world_size > 1:
        torch.distributed.all_gather_object(counts, prompts)
    else:
        counts = [prompts]
    trainer.save_model(str(out / "final"))  # every process calls it; the Trainer writes on process 0
    if rank == 0:
        tokenizer.save_pretrained(str(out / "final"))
        entries = [e for e in trainer.state.log_history if any(k.startswith("deer/") for k in e)]
        (out / "report.json").write_text(json.dumps({"world_size": world_size, "deer_logs": entries, "prompts_per_process": counts,
                                                     "model_training_after": model.training}))


if __name__ == "__main__":
    main()
