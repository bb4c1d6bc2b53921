"""DEER while a model trains: the Trainer callback and the one-function call for any loop.

What the callback logs must equal a separate ``deer.probe`` of the same weights; the probe must
leave the training state as it found it (train mode, gradients, random state); under 2-process
data parallelism (gloo, torch.distributed.run) the metrics are the same and each process encodes
about half of the prompts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import deer
from deer.integrations import DeerCallback, logged_metrics, probe_during_training
from kg_data.load import load_kg
from kg_data.queries import build_queries

SCRIPT = Path(__file__).with_name("train_with_callback.py")
ROOT = Path(__file__).resolve().parents[1]


def _fresh_model(tiny_clm_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_clm_dir, dtype=torch.float32), AutoTokenizer.from_pretrained(tiny_clm_dir)


def _assert_logs_equal_a_separate_probe(report: dict, final_dir: Path, kg_dir: Path, steps: int):
    last = [e for e in report["deer_logs"] if e["step"] == steps]
    assert len(last) == 1, report["deer_logs"]
    separate = deer.probe(build_queries(load_kg(kg_dir), "test"), str(final_dir), show_progress=False)
    for key, value in logged_metrics(separate).items():
        assert last[0][key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert report["model_training_after"] is True


def test_callback_logs_equal_a_separate_probe(tiny_clm_dir, tiny_kg_dir, tmp_path):
    from tests import train_with_callback

    train_with_callback.main([str(tiny_clm_dir), str(tiny_kg_dir), str(tmp_path), "--steps", "4", "--every", "2"])
    report = json.loads((tmp_path / "report.json").read_text())
    assert [e["step"] for e in report["deer_logs"]] == [2, 4]
    assert all({"deer/hit@10", "deer/mrr", "deer/mr", "deer/seconds"} <= set(e) for e in report["deer_logs"])
    _assert_logs_equal_a_separate_probe(report, tmp_path / "final", tiny_kg_dir, 4)
    # one process: it encoded every prompt (12 entities + 4 queries)
    assert report["prompts_per_process"] == [{"2": 16, "4": 16}]  # JSON keys: the steps as strings


def test_the_trainers_own_loss_is_logged_at_every_step(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """Issue 22.1: the probe's trainer.log in on_step_end cleared should_log, so the Trainer skipped
    the loss entry of every probe step and reported the next as a two-step average.  With
    logging_steps=1 and a probe every 2 steps, every step has its loss, equal to a run without the callback."""
    from tests import train_with_callback

    losses = {}
    for every in (2, 0):
        train_with_callback.main([str(tiny_clm_dir), str(tiny_kg_dir), str(tmp_path / str(every)), "--steps", "6", "--every", str(every)])
        losses[every] = json.loads((tmp_path / str(every) / "report.json").read_text())["loss_logs"]
    assert [e["step"] for e in losses[2]] == [1, 2, 3, 4, 5, 6]
    assert [e["loss"] for e in losses[2]] == pytest.approx([e["loss"] for e in losses[0]], rel=1e-6)


def test_a_deer_metric_picks_the_best_checkpoint(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """Issue 22.2: after an evaluation the DEER metrics join the Trainer's metrics as eval_deer/...,
    so metric_for_best_model="deer/mrr" with load_best_model_at_end selects a checkpoint by them."""
    from tests import train_with_callback

    train_with_callback.main([str(tiny_clm_dir), str(tiny_kg_dir), str(tmp_path), "--steps", "6", "--every", "2", "--select-best"])
    report = json.loads((tmp_path / "report.json").read_text())
    mrr = {e["step"]: e["deer/mrr"] for e in report["deer_logs"]}
    assert sorted(mrr) == [2, 4, 6]
    best_step = max(mrr, key=lambda step: (mrr[step], -step))  # the first of the best: the Trainer needs a strict gain
    assert report["best_metric"] == pytest.approx(mrr[best_step], rel=1e-9)
    assert report["best_model_checkpoint"].endswith(f"checkpoint-{best_step}")
    assert [e["step"] for e in report["eval_logs"]] == [2, 4, 6]


def test_probe_leaves_training_state_untouched(tiny_clm_dir, tiny_kg_dir):
    model, tokenizer = _fresh_model(tiny_clm_dir)
    model.train()
    batch = tokenizer(["(dog, hypernym, mammal)"], return_tensors="pt")
    model(**batch, labels=batch["input_ids"]).loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    result = probe_during_training(model, tokenizer, queries)
    assert torch.equal(torch.rand(3), expected_next)  # the probe drew no random numbers from the training run
    assert model.training
    assert all(p.requires_grad for p in model.parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), weights[name]), name
        if name in grads:
            assert torch.equal(p.grad, grads[name]), name
    model.eval()
    plain = deer.probe(queries, (model, tokenizer), show_progress=False)
    np.testing.assert_array_equal(result.table["deer_rank_filtered"], plain.table["deer_rank_filtered"])


def test_probe_leaves_each_part_of_the_model_in_its_own_mode(tiny_clm_dir, tiny_kg_dir):
    """A model training with one part kept in eval mode (frozen, its dropout off) came back from the probe
    with every part training (model.train() on the whole): each module is put back in the mode it had."""
    model, tokenizer = _fresh_model(tiny_clm_dir)
    model.train()
    model.model.layers[0].eval()
    before = {name: module.training for name, module in model.named_modules()}
    probe_during_training(model, tokenizer, build_queries(load_kg(tiny_kg_dir), "test"))
    assert {name: module.training for name, module in model.named_modules()} == before


def test_probing_while_training_hashes_no_weights(tiny_clm_dir, tiny_kg_dir, monkeypatch):
    """Bug 4: every evaluation hashed every byte of every weight (a 7B bf16 model: ~14 GB copied to the
    host and hashed per call); the probe of a model in training is named without reading its weights."""
    from deer.backends import fingerprints

    hashed = []
    monkeypatch.setattr(fingerprints, "tensors_fingerprint", lambda *args, **kwargs: hashed.append(1) or "x")
    model, tokenizer = _fresh_model(tiny_clm_dir)
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    first = probe_during_training(model, tokenizer, queries, step=10)
    probe_during_training(model, tokenizer, queries, step=20)
    assert hashed == []
    assert first.metadata["model"]["fingerprint"].startswith("in-training:") and first.metadata["model"]["fingerprint"].endswith("step-10")


def test_probing_while_training_restores_every_cuda_generator(tiny_clm_dir, tiny_kg_dir, monkeypatch):
    """Bug 4: only the CPU generator was restored; CUDA's states (one per device) are saved and restored too."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: calls.append("get") or ["state-0", "state-1"])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: calls.append(("set", states)))
    model, tokenizer = _fresh_model(tiny_clm_dir)
    probe_during_training(model, tokenizer, build_queries(load_kg(tiny_kg_dir), "test"))
    assert calls == ["get", ("set", ["state-0", "state-1"])]


def test_callback_without_trainer_writes_the_state_log_and_keeps_results(tiny_clm_dir, tiny_kg_dir, tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    model, tokenizer = _fresh_model(tiny_clm_dir)
    callback = DeerCallback(str(tiny_kg_dir), split="test", every_n_steps=3, out=tmp_path / "probes")
    state, args = TrainerState(), TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True)
    for step in (1, 2, 3):
        state.global_step = step
        callback.on_step_end(args, state, TrainerControl(), model=model, processing_class=tokenizer)
    callback.on_evaluate(args, state, TrainerControl(), model=model, processing_class=tokenizer)  # same step: not again
    assert list(callback.results) == [3] and [e["step"] for e in state.log_history] == [3]
    assert (tmp_path / "probes" / "step-3" / "metrics.json").is_file()
    with pytest.raises(ValueError, match="every_n_steps"):
        DeerCallback(str(tiny_kg_dir), every_n_steps=0)


def test_an_evaluation_after_training_probes_the_weights_it_evaluates(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """An evaluation after training (load_best_model_at_end loaded another checkpoint's weights, then
    trainer.evaluate() at the final step) reported the DEER metrics of the final step's weights, kept
    from that step's probe: the weights evaluated now are probed."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    model, tokenizer = _fresh_model(tiny_clm_dir)
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    callback = DeerCallback(queries, every_n_steps=2)
    state, args = TrainerState(), TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True)
    state.global_step = 2
    callback.on_step_end(args, state, TrainerControl(), model=model, processing_class=tokenizer)
    at_step = callback.results[2]
    callback.on_train_end(args, state, TrainerControl(), model=model, processing_class=tokenizer)
    with torch.no_grad():  # the best checkpoint's weights loaded at the end of training
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    metrics = {}
    callback.on_evaluate(args, state, TrainerControl(), model=model, processing_class=tokenizer, metrics=metrics)
    now = deer.probe(queries, (model.eval(), tokenizer), show_progress=False)
    assert metrics["eval_deer/mrr"] == pytest.approx(now.metrics["mrr"], rel=1e-9)
    assert metrics["eval_deer/mr"] == pytest.approx(now.metrics["mr"], rel=1e-9)
    assert list(callback.results) == [2] and callback.results[2] is at_step  # step 2's own probe (its weights) is kept, not replaced by the later weights'


def test_two_training_runs_probed_at_one_step_are_not_called_the_same_weights(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """Two training runs (other weights) saved by DeerCallback at the same step share their identity (class, name,
    size, step: no weights hashed), and screening their folders marked the second "same weights as" the first."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from experiments.runs import load_run, same_weights

    state, args = TrainerState(), TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True)
    state.global_step = 100
    for run in ("a", "b"):
        model, tokenizer = _fresh_model(tiny_clm_dir)
        if run == "b":
            with torch.no_grad():  # another seed's weights
                for parameter in model.parameters():
                    parameter.add_(torch.randn_like(parameter) * 0.5)
        DeerCallback(str(tiny_kg_dir), every_n_steps=100, out=tmp_path / run).on_step_end(
            args, state, TrainerControl(), model=model, processing_class=tokenizer)
    runs = [load_run(tmp_path / run / "step-100", label=run) for run in ("a", "b")]
    assert runs[0].metrics != runs[1].metrics
    assert same_weights(runs) == {}


def test_two_process_data_parallel_training_shares_the_probe(tiny_clm_dir, tiny_kg_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(SCRIPT), str(tiny_clm_dir), str(tiny_kg_dir), str(tmp_path), "--steps", "4", "--every", "2"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=420)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"2-process training with the callback hung (no exit in 420 s): {error.stderr}")
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["world_size"] == 2
    assert [e["step"] for e in report["deer_logs"]] == [2, 4]
    _assert_logs_equal_a_separate_probe(report, tmp_path / "final", tiny_kg_dir, 4)
    for step in ("2", "4"):  # 16 prompts dealt out: 8 each, none twice
        assert [counts[step] for counts in report["prompts_per_process"]] == [8, 8]


def test_training_demo_on_a_tiny_model(tiny_clm_dir, tiny_kg_dir, tmp_path):
    from experiments.training_demo import run_training_demo

    result = run_training_demo(tmp_path / "demo", model=str(tiny_clm_dir), kg=str(tiny_kg_dir), n_queries=3, steps=4, every=2,
                               batch_size=2, learning_rate=1e-3, bear=True)
    steps = {(row["set"], row["step"]) for row in result["rows"]}
    assert steps == {(name, step) for name in ("seen", "heldout") for step in (0, 2, 4)}
    assert all(row["queries"] == 3 for row in result["rows"])
    assert (tmp_path / "demo" / "curves.png").is_file() and (tmp_path / "demo" / "probes" / "seen" / "step-4").is_dir()
    bear = result["bear_heldout"]
    assert bear["deer_hit@10"] == pytest.approx(bear["deer_hit@10_logged_at_last_step"])  # final weights, probed twice
    assert result["loss_first_last"] is not None and result["train_seconds_per_step"] > 0


def test_the_callbacks_seed_picks_the_few_shot_examples_as_deer_probes_does(tiny_clm, tiny_kg_dir, tmp_path):
    """DeerCallback(kg, seed=S) sampled its subset with S but took its few-shot examples with seed 0, where
    deer.probe(kg, seed=S) takes both with S: the same weights gave other numbers than a separate probe."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    model, tokenizer = tiny_clm
    args = TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True)
    callback = DeerCallback(str(tiny_kg_dir), every_n_steps=1, seed=2, templates=None)
    state = TrainerState()
    state.global_step = 1
    callback.on_step_end(args, state, TrainerControl(), model=model, processing_class=tokenizer)
    separate = deer.probe(str(tiny_kg_dir), (model, tokenizer), seed=2, show_progress=False)
    assert callback.results[1].metadata["templates"]["seed"] == separate.metadata["templates"]["seed"] == 2
    assert callback.results[1].table["deer_rank_filtered"].tolist() == separate.table["deer_rank_filtered"].tolist()


def test_the_training_demos_seed_picks_the_few_shot_examples_too(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """`deer experiment training-demo --seed S` sampled its query sets with S but probed them with seed 0's few-shot
    examples, where `deer probe --subset N --seed S` takes both with S: its step-0 numbers were not a separate probe's."""
    from experiments.training_demo import run_training_demo

    run_training_demo(tmp_path / "demo", model=str(tiny_clm_dir), kg=str(tiny_kg_dir), n_queries=3, steps=1, every=1,
                      batch_size=2, seed=3, bear=False)
    before_training = deer.load_result(tmp_path / "demo" / "probes" / "heldout" / "step-0")
    separate = deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), subset=3, seed=3, dtype="float32", show_progress=False)
    assert before_training.metadata["templates"]["seed"] == separate.metadata["templates"]["seed"] == 3
    assert before_training.table["deer_rank_filtered"].tolist() == separate.table["deer_rank_filtered"].tolist()


# -- the callback's options refused before training ------------------------------------------------


@pytest.mark.parametrize("every", [2.5, 0, -1, True])
def test_callback_every_n_steps_must_be_a_whole_count(every, tiny_kg_dir):
    from deer.integrations import DeerCallback

    with pytest.raises(ValueError, match=r"every_n_steps="):
        DeerCallback(str(tiny_kg_dir), every_n_steps=every)


def test_callback_out_that_is_a_file_is_refused(tiny_kg_dir, tmp_path):
    from deer.integrations import DeerCallback

    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match=r"out=.*a_file.*exists and is not a folder"):
        DeerCallback(str(tiny_kg_dir), out=tmp_path / "a_file")


def _args(tmp_path, metric):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True, metric_for_best_model=metric)


@pytest.mark.parametrize("metric", ["deer/mrrr", "eval_deer/hit@100"])
def test_callback_refuses_a_best_model_metric_it_does_not_report(metric, tiny_kg_dir, tmp_path, no_model_loading):
    from transformers import TrainerControl, TrainerState

    from deer.integrations import DeerCallback

    added = []
    trainer = types.SimpleNamespace(args=_args(tmp_path, metric), add_callback=added.append)
    listed = r"DeerCallback reports deer/hit@1, deer/hit@3, deer/hit@10, deer/mrr, deer/mr, deer/seconds"
    with pytest.raises(ValueError, match=rf"metric_for_best_model='{metric}': {listed}"):
        DeerCallback.attach(trainer, str(tiny_kg_dir))
    assert added == []
    callback = DeerCallback(str(tiny_kg_dir), at_start=True)  # added without attach: refused when training begins
    with pytest.raises(ValueError, match="metric_for_best_model"):
        callback.on_train_begin(_args(tmp_path, metric), TrainerState(), TrainerControl())
    assert callback.results == {}


def test_callback_accepts_the_metrics_it_reports(tiny_kg_dir, tmp_path):
    from deer.integrations import DeerCallback

    for metric in ("deer/mrr", "eval_deer/hit@10", "loss", "eval_other/x"):
        trainer = types.SimpleNamespace(args=_args(tmp_path, metric), add_callback=lambda callback: None)
        DeerCallback.attach(trainer, str(tiny_kg_dir))
    with pytest.raises(ValueError, match="on_evaluate=False"):
        DeerCallback.attach(types.SimpleNamespace(args=_args(tmp_path, "deer/mrr"), add_callback=print), str(tiny_kg_dir),
                            on_evaluate=False)
