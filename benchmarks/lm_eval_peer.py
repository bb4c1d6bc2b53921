"""Run lm-evaluation-harness 0.4.13 on a local copy of its ``bear`` task; run by ``bench_lm_eval.py``
with the peer's own interpreter (lm-eval lives in its own environment, never in the project's).

Its task definition is lm-eval's ``bear.yaml`` with the data read from a local JSON Lines file instead
of the hub: ``doc_to_text: ""``, ``target_delimiter: ""``, ``doc_to_choice: text_options``, metric
``acc`` -- every statement scored whole after the model's prefix token (BOS where there is one).
The model is loaded first; the time reported is ``simple_evaluate`` alone.  Writes JSON: seconds, the
accuracy, and per document (in file order) each option's log-likelihood.

    PEER/bin/python benchmarks/lm_eval_peer.py --model FOLDER --task-dir DIR --batch-size 32 --out peer.json
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="A Hugging Face model folder.")
    parser.add_argument("--task-dir", required=True, help="Folder holding bear_local.yaml and its data.")
    parser.add_argument("--batch-size", default="32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    started = time.perf_counter()
    model = HFLM(pretrained=args.model, dtype="float32", device=args.device, batch_size=args.batch_size)
    load_seconds = time.perf_counter() - started
    tasks = TaskManager(include_path=args.task_dir)
    started = time.perf_counter()
    results = simple_evaluate(model=model, tasks=["bear_local"], task_manager=tasks, log_samples=True)
    seconds = time.perf_counter() - started
    samples = sorted(results["samples"]["bear_local"], key=lambda sample: sample["doc_id"])
    report = {
        "seconds": seconds,
        "load_seconds": load_seconds,
        "accuracy": results["results"]["bear_local"]["acc,none"],
        "prefix_token_id": model.prefix_token_id,
        "batch_size": args.batch_size,
        "option_loglikelihoods": [[float(response[0]) for response in sample["filtered_resps"]] for sample in samples],
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    main()
