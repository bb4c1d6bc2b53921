"""Probing a model while it trains: ``probe_during_training`` for any loop, and ``DeerCallback``
(a Hugging Face ``TrainerCallback``) around it.

Both run DEER on a fixed query set with the model in eval mode without gradients, then back to
train mode (gradients, optimizer state and RNG untouched).  In a torch.distributed job every
process calls it and encodes its share; sharded weights (FSDP, ZeRO-3) are gathered first.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from deer.api import load_queries, probe
from deer.backends.fingerprints import training_identity
from deer.backends.models import LoadedModel
from deer.base.errors import check_count, check_flag, check_instance, check_text, wrong_type
from deer.platform.distributed import full_weights, world
from deer.platform.result import RunResult
from deer.platform.templates import PromptTemplates
from deer.platform.validate import OptionError, check_out_folder
from kg_data.kg import TextualKG
from kg_data.queries import QuerySet

LOGGED_METRICS = ("hit@1", "hit@3", "hit@10", "mrr", "mr")


def probe_during_training(model, tokenizer, queries: QuerySet, templates: PromptTemplates | None = None, *,
                          token_budget: int | None = None, show_progress: bool = False, step: int | None = None) -> RunResult:
    """DEER on ``model`` as it is now.

    Call it from every process of a distributed job (all with the same queries).  Python's, numpy's
    and torch's random states are restored after.  The weights are not hashed (nothing is cached):
    the run is identified by ``training_identity`` (class, name, parameter count, ``step``)."""
    if not (hasattr(model, "parameters") and hasattr(model, "config")):
        raise wrong_type("model", model, "a transformers model")
    if not callable(getattr(tokenizer, "encode", None)):
        raise wrong_type("tokenizer", tokenizer, "a tokenizer (transformers')")
    check_probing(queries, templates, token_budget)
    check_flag("show_progress", show_progress)
    check_count("step", step, 0, allow_none=True)
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # else no CUDA generator state to restore
    rng_states = random.getstate(), np.random.get_state(), torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None
    try:
        with full_weights(model):
            loaded = LoadedModel.from_objects(model, tokenizer, fingerprint=training_identity(model, step))
            return probe(queries, loaded, templates=templates or PromptTemplates(), token_budget=token_budget,
                         show_progress=show_progress, distributed=world()[1] > 1)
    finally:
        random.setstate(rng_states[0])
        np.random.set_state(rng_states[1])
        torch.set_rng_state(rng_states[2])
        if rng_states[3] is not None:
            torch.cuda.set_rng_state_all(rng_states[3])


def check_probing(queries, templates, token_budget) -> None:
    """What every probe during training takes, each of its type and named: before training, not at the first probe."""
    check_instance("queries", queries, QuerySet, "a QuerySet (deer.load_queries)", allow_none=False)
    check_instance("templates", templates, PromptTemplates)
    check_count("token_budget", token_budget, 1, allow_none=True)


def logged_metrics(result: RunResult, prefix: str = "deer", names=LOGGED_METRICS) -> dict[str, float]:
    """``{"deer/hit@10": ..., "deer/mrr": ...}``: the filtered metrics (the probe's headline ones)."""
    return {f"{prefix}/{name}": float(result.metrics[name]) for name in names}


class DeerCallback(TrainerCallback):
    """Run DEER every ``every_n_steps`` optimizer steps and/or after each evaluation (and, with
    ``at_start``, once before the first step).

    ``queries``: a ``QuerySet`` (``deer.load_queries``), or a KG name/folder with ``split``, ``subset`` and
    ``seed`` (which also picks the few-shot examples unless ``templates`` are given, as in ``deer.probe``).
    ``trainer``: the Trainer, whose ``log`` carries the metrics (``attach`` sets it); without one they go into
    ``state.log_history`` only.  ``out``: a folder where process 0 saves
    each result as ``step-N``; results are also kept in ``self.results`` ({step: RunResult}); a probe after training
    (an evaluation of the best checkpoint loaded at the end) is logged only.
    After an evaluation the metrics join the Trainer's (``eval_deer/mrr``, ...), for
    ``metric_for_best_model="deer/mrr"`` (checked against the names reported when attached and when
    training begins); an ``EarlyStoppingCallback`` must come after this callback."""

    def __init__(self, queries, *, every_n_steps: int | None = None, on_evaluate: bool = True, at_start: bool = False, trainer=None,
                 templates: PromptTemplates | None = None, split: str = "test", subset: int | None = None, seed: int = 0,
                 token_budget: int | None = None, out=None, prefix: str = "deer", keep_results: bool = True):
        check_count("every_n_steps", every_n_steps, 1, allow_none=True)  # 2.5, True or 0 would probe never or oddly
        check_out_folder(out)  # an existing file would fail only at the first probe's save
        for name, flag in (("on_evaluate", on_evaluate), ("at_start", at_start), ("keep_results", keep_results)):
            check_flag(name, flag)
        check_text("prefix", prefix)
        if trainer is not None and not any(callable(getattr(trainer, method, None)) for method in ("log", "add_callback")):
            raise wrong_type("trainer", trainer, "a transformers Trainer or None")
        check_instance("queries", queries, (QuerySet, TextualKG, str, os.PathLike), "a QuerySet, or a KG name, folder or TextualKG",
                       allow_none=False)
        self.queries = queries if isinstance(queries, QuerySet) else load_queries(queries, split=split, subset=subset, seed=seed)
        check_probing(self.queries, templates, token_budget)
        self.every_n_steps, self.on_evaluate_too, self.at_start = every_n_steps, on_evaluate, at_start
        # Without templates, the few-shot examples follow seed as deer.probe(kg, seed=...) has them (they were seed 0's).
        self.trainer, self.templates, self.token_budget = trainer, templates or PromptTemplates(seed=seed), token_budget
        self.out = Path(out) if out is not None else None
        self.prefix, self.keep_results = prefix, keep_results
        self.results: dict[int, RunResult] = {}
        self.seconds: dict[int, float] = {}
        self._last_step: int | None = None
        self._after_training = False  # probes after on_train_end are logged, never kept as their step's
        self._last_logs: dict[str, float] = {}

    @classmethod
    def attach(cls, trainer, queries, **options) -> DeerCallback:
        """A callback logging through ``trainer``, added to it."""
        callback = cls(queries, trainer=trainer, **options)
        callback.check_best_metric(getattr(trainer, "args", None))  # before training, not at its first evaluation
        trainer.add_callback(callback)
        return callback

    def reported_metrics(self) -> list[str]:
        """The names this callback logs (after an evaluation also as ``eval_<name>``)."""
        return [f"{self.prefix}/{name}" for name in (*LOGGED_METRICS, "seconds")]

    def check_best_metric(self, args) -> None:
        """``args.metric_for_best_model`` naming this callback's prefix must be one it adds to the evaluation metrics:
        a typo would surface only at the first evaluation, after training steps."""
        metric = getattr(args, "metric_for_best_model", None) or ""
        name = metric.removeprefix("eval_")
        if not name.startswith(f"{self.prefix}/"):
            return
        if name not in self.reported_metrics():
            raise OptionError("metric_for_best_model", metric, f"DeerCallback reports {', '.join(self.reported_metrics())} "
                                                               "(each also as eval_<name>)")
        if not self.on_evaluate_too:
            raise OptionError("metric_for_best_model", metric, "DeerCallback(on_evaluate=False) adds no metric to the evaluations")

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.check_best_metric(args)
        self._after_training = False
        if self.at_start:
            self._probe(state, control, model, processing_class)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every_n_steps and state.global_step % self.every_n_steps == 0:
            self._probe(state, control, model, processing_class)

    def on_train_end(self, args, state, control, **kwargs):
        # The end may load other weights at this step (load_best_model_at_end): an evaluation after it probes them, and
        # logs what it finds without taking the place of the step's own probe in results and out.
        self._last_step, self._after_training = None, True

    def on_evaluate(self, args, state, control, model=None, processing_class=None, metrics=None, **kwargs):
        if self.on_evaluate_too:
            self._probe(state, control, model, processing_class)
            if metrics is not None:  # the Hugging Face convention: evaluation metrics are named eval_*
                metrics.update({f"eval_{name}": value for name, value in self._last_logs.items()})

    def _probe(self, state, control, model, tokenizer):
        if model is None or tokenizer is None:
            raise ValueError("DeerCallback needs the model and its tokenizer: pass processing_class=tokenizer to the Trainer")
        if self._last_step == state.global_step:  # every N steps and an evaluation at the same step: once
            return
        self._last_step = state.global_step
        started = time.perf_counter()
        result = probe_during_training(model, tokenizer, self.queries, self.templates, token_budget=self.token_budget,
                                       step=state.global_step)
        seconds = time.perf_counter() - started
        if not self._after_training:
            self.seconds[state.global_step] = seconds
            if self.keep_results:
                self.results[state.global_step] = result
            if self.out is not None and world()[0] == 0:
                result.save(self.out / f"step-{state.global_step}")
        logs = self._last_logs = {**logged_metrics(result, self.prefix), f"{self.prefix}/seconds": seconds}
        if self.trainer is not None:
            should_log = control.should_log
            self.trainer.log(logs)
            # Trainer.log ends in on_log, which clears should_log: the Trainer would skip this step's own
            # loss entry and report the next one as a two-step average.
            control.should_log = should_log
        else:
            state.log_history.append({**logs, "step": state.global_step})
