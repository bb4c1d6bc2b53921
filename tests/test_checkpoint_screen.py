"""Screening a checkpoint series: Trainer output folders, name@revision, curves against the step,
and the embedding cache that makes a longer series encode only its new checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from deer.backends.models import ModelUnavailableError, resolve_model
from experiments.checkpoints import named_checkpoints, trainer_checkpoints
from experiments.cli import main
from tests.tiny_models import save_checkpoint


def _fake_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_trainer_folder_is_read_by_step_with_its_final_model(tmp_path):
    for step in (10, 2, 100):
        _fake_checkpoint(tmp_path / "out" / f"checkpoint-{step}")
    (tmp_path / "out" / "runs").mkdir()  # other folders are not checkpoints
    assert [(c.label, c.step) for c in trainer_checkpoints(tmp_path / "out")] == \
        [("checkpoint-2", 2), ("checkpoint-10", 10), ("checkpoint-100", 100)]
    (tmp_path / "out" / "config.json").write_text("{}")
    (tmp_path / "out" / "trainer_state.json").write_text(json.dumps({"global_step": 100}))
    assert len(trainer_checkpoints(tmp_path / "out")) == 3  # the final model is checkpoint-100 again
    (tmp_path / "out" / "trainer_state.json").write_text(json.dumps({"global_step": 120}))
    assert trainer_checkpoints(tmp_path / "out")[-1].step == 120
    (tmp_path / "out" / "checkpoint-7").mkdir()
    with pytest.raises(FileNotFoundError, match="checkpoint-7: a checkpoint folder without config.json"):
        trainer_checkpoints(tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint-<step> folders"):
        trainer_checkpoints(tmp_path / "empty")


def test_names_with_revisions(tmp_path):
    folder = _fake_checkpoint(tmp_path / "checkpoint-30")
    series = named_checkpoints(["EleutherAI/pythia-160m@step1000", "org/model@main", str(folder), "smollm2-135m"])
    assert [(c.model, c.step) for c in series] == [("EleutherAI/pythia-160m@step1000", 1000), ("org/model@main", None),
                                                   (str(folder), 30), ("smollm2-135m", None)]
    resolved = resolve_model("EleutherAI/pythia-160m@step1000")
    assert (resolved.source, resolved.revision, resolved.kind) == ("EleutherAI/pythia-160m", "step1000", "hub")
    assert resolve_model("gpt2").revision is None
    with pytest.raises(ModelUnavailableError, match="no revision after '@'"):
        resolve_model("org/model@")
    at_folder = _fake_checkpoint(tmp_path / "model@v2")  # a local folder with '@' in its name stays a folder
    assert resolve_model(str(at_folder)).kind == "local"


@pytest.fixture()
def checkpoint_series(tiny_clm_dir, tmp_path) -> Path:
    """A Trainer-like output folder: checkpoint-1..3."""
    for step in (1, 2, 3):
        save_checkpoint(tiny_clm_dir, tmp_path / "trainer-out", step)
    return tmp_path / "trainer-out"


def _screen(tiny_kg_dir, tmp_path, checkpoints: Path, out: str):
    result = CliRunner().invoke(main, ["experiment", "screen", "--kg", str(tiny_kg_dir), "--checkpoints", str(checkpoints),
                                       "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / out)])
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / out / "screen.json").read_text())


def test_screen_a_series_draws_curves_and_encodes_only_new_checkpoints(tiny_kg_dir, tiny_clm_dir, tmp_path, checkpoint_series,
                                                                       monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))  # an empty embedding cache, whatever ran before
    first = _screen(tiny_kg_dir, tmp_path, checkpoint_series, "first")
    curves = pd.read_csv(tmp_path / "first" / "curves.csv")
    assert curves["checkpoint"].tolist() == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert curves["step"].tolist() == [1, 2, 3]
    board = {row["model"]: row for row in first["leaderboard"]}
    for _, row in curves.iterrows():  # the curve's numbers are the leaderboard's
        assert row["deer mrr"] == pytest.approx(board[row["checkpoint"]]["mrr"])
        assert board[row["checkpoint"]]["encoded_now"] == 12 + 4
    assert (tmp_path / "first" / "curves.png").stat().st_size > 1000
    assert len({r["mrr"] for r in first["leaderboard"]}) > 1 or len({r["mr"] for r in first["leaderboard"]}) > 1
    assert len(list((tmp_path / "runs").iterdir())) == 3  # one run folder per checkpoint
    for row in first["leaderboard"]:  # chance-adjusted beside the raw numbers; equal scores share a place
        run_metrics = json.loads(next((tmp_path / "runs").glob(f"*{row['model']}*/metrics.json")).read_text())["deer"]
        assert row["mrr_adjusted"] == pytest.approx(run_metrics["adjusted_index"]["filtered"]["mrr"])
        assert row["place"] == 1 + sum(other["hit@10"] > row["hit@10"] for other in first["leaderboard"])

    save_checkpoint(tiny_clm_dir, checkpoint_series, 4)  # the series grows by one checkpoint
    second = _screen(tiny_kg_dir, tmp_path, checkpoint_series, "second")
    encoded = {row["model"]: row["encoded_now"] for row in second["leaderboard"]}
    assert encoded == {"checkpoint-1": 0, "checkpoint-2": 0, "checkpoint-3": 0, "checkpoint-4": 16}
    assert pd.read_csv(tmp_path / "second" / "curves.csv")["step"].tolist() == [1, 2, 3, 4]


def test_checkpoints_named_alike_in_two_runs_stay_apart(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """Bug 16: screen showed checkpoints of two training runs both as 'checkpoint-10' (and the cloze
    benchmarks wrote both into one folder); labels and folders now keep as much of the path as tells them apart."""
    import shutil

    from click.testing import CliRunner

    from experiments.cli import main
    from experiments.report import distinct_labels

    assert distinct_labels(["x/run-a/checkpoint-10", "x/run-b/checkpoint-10"]) == ["run-a/checkpoint-10", "run-b/checkpoint-10"]
    assert distinct_labels(["smollm2-135m", "/m/gemma"]) == ["smollm2-135m", "gemma"]
    models = [tmp_path / run / "checkpoint-10" for run in ("run-a", "run-b")]
    for model in models:
        shutil.copytree(tiny_clm_dir, model)
    result = CliRunner().invoke(main, ["experiment", "screen", "--kg", str(tiny_kg_dir), "--model", str(models[0]), "--model",
                                       str(models[1]), "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "screen")])
    assert result.exit_code == 0, result.output
    board = json.loads((tmp_path / "screen" / "screen.json").read_text())["leaderboard"]
    assert sorted(row["model"] for row in board) == ["run-a/checkpoint-10", "run-b/checkpoint-10"]


def test_a_checkpoint_with_the_same_weights_as_another_is_reported_and_probed_once(tiny_kg_dir, tiny_clm_dir, tmp_path,
                                                                                    checkpoint_series):
    """Issue 22.9: hub revisions often serve byte-identical weights; such a checkpoint is named as a repeat
    (same run spec: weights, tokenizer, dtype) and its ranks are the first one's, not a second probe's."""
    import shutil

    repeat = shutil.copytree(checkpoint_series / "checkpoint-1", tmp_path / "elsewhere" / "step-1-again")
    result = CliRunner().invoke(main, ["experiment", "screen", "--kg", str(tiny_kg_dir), "--model", str(checkpoint_series / "checkpoint-1"),
                                       "--model", str(checkpoint_series / "checkpoint-2"), "--model", str(repeat),
                                       "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "screen")])
    assert result.exit_code == 0, result.output
    assert "step-1-again: the same weights as checkpoint-1" in result.output and "not probed again" in result.output
    assert len(list((tmp_path / "runs").iterdir())) == 2  # no run folder for the repeat: it was not probed
    numbers = json.loads((tmp_path / "screen" / "screen.json").read_text())
    assert numbers["same_weights"] == {"step-1-again": "checkpoint-1"}
    board = {row["model"]: row for row in numbers["leaderboard"]}
    assert [board[m]["same_weights_as"] for m in ("checkpoint-1", "checkpoint-2", "step-1-again")] == ["", "", "checkpoint-1"]
    assert board["step-1-again"]["mrr"] == board["checkpoint-1"]["mrr"] and board["step-1-again"]["seconds"] is None
    # The probed ones report their seconds, from their run's metadata (run_probes through run_kg).
    assert all(board[m]["seconds"] > 0 for m in ("checkpoint-1", "checkpoint-2"))
    assert "same weights as checkpoint-1" in result.output


def test_the_base_model_is_step_0_of_a_series(tiny_kg_dir, tiny_clm_dir, tmp_path, checkpoint_series):
    """Issue 22.9: --base-model puts the model a series started from at step 0 of the curves."""
    result = CliRunner().invoke(main, ["experiment", "screen", "--kg", str(tiny_kg_dir), "--checkpoints", str(checkpoint_series),
                                       "--base-model", str(tiny_clm_dir), "--runs-dir", str(tmp_path / "runs"),
                                       "--out", str(tmp_path / "screen")])
    assert result.exit_code == 0, result.output
    curves = pd.read_csv(tmp_path / "screen" / "curves.csv")
    assert curves["checkpoint"].tolist() == [tiny_clm_dir.name, "checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert curves["step"].tolist() == [0, 1, 2, 3]


def test_a_bundled_model_not_installed_is_named_before_the_first_model_is_probed(tiny_kg_dir, tiny_clm_dir, tmp_path,
                                                                                  monkeypatch):
    """`screen --model A --model gemma3-270m` probed A, then stopped at the alias whose package is not installed."""
    import deer.backends.models as models

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))  # no converted folder of the alias
    monkeypatch.setattr(models, "_package_folder", lambda module: None)  # its pip package absent
    result = CliRunner().invoke(main, ["experiment", "screen", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--model", "gemma3-270m", "--k-shot", "0", "--runs-dir", str(tmp_path / "runs"),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "Model 'gemma3-270m' (" in result.output and "is not installed. Install it with:" in result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing probed first
