"""Issue 21 bugs 7, 8 and 16 (screen), through the `deer experiment` CLI with the tiny random models.

Bug 7: compute-time must time DEER at the probe's own token budget unless --token-budget is given.
Bug 8: every command opens (and fingerprints) each model once.
Bug 16: two checkpoints named alike in two training runs get distinct names in a screen.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from deer.platform.metrics import rank_metrics
from experiments.cli import main
from experiments.runs import label_runs_apart, load_run
from experiments.screen import run_screen
from tests import test_experiments as experiment_tests

# Fixtures of the experiment tests: a second tiny model (other weights) and stand-in BEAR/LAMA probes.
second_clm_dir = experiment_tests.second_clm_dir
stand_in_references = experiment_tests.stand_in_references
invoke = experiment_tests.invoke


@pytest.fixture()
def experiment_kg_dir(tmp_path) -> Path:
    return experiment_tests.write_experiment_kg(tmp_path / "experiment_kg")


@pytest.fixture()
def model_loads(monkeypatch) -> dict:
    """Counts ``load_model`` calls per model name and ``model_fingerprint`` calls (the costly parts of opening)."""
    from deer.backends import models

    counts = {"loads": Counter(), "fingerprints": 0}
    real_load, real_fingerprint = models.load_model, models.model_fingerprint

    def load(name, *args, **kwargs):
        counts["loads"][str(name)] += 1
        return real_load(name, *args, **kwargs)

    def fingerprint(model):
        counts["fingerprints"] += 1
        return real_fingerprint(model)

    monkeypatch.setattr(models, "load_model", load)
    monkeypatch.setattr(models, "model_fingerprint", fingerprint)
    return counts


# -- bug 7 ---------------------------------------------------------------------------------------


def test_compute_time_gives_deer_the_probes_default_budget_unless_told(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """The budget reaching the DEER probe (warm-up and timed run) is the probe's default (None, which
    the probe resolves to CPU_TOKEN_BUDGET here) unless --token-budget is given; the JSON records both."""
    from deer.backends.batching import CPU_TOKEN_BUDGET
    from experiments import compute_time

    budgets = []
    real_probe = compute_time.deer_probe

    def capturing_probe(*args, **kwargs):
        budgets.append(kwargs.get("token_budget"))
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(compute_time, "deer_probe", capturing_probe)
    args = ["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train", "--query-sizes", "1,2",
            "--repeats", "1", "--candidates", "4", "--deer-queries", "2", "--scorers", "bear_ref", "--device", "cpu"]
    invoke([*args, "--out", str(tmp_path / "default")])
    numbers = json.loads((tmp_path / "default" / "compute_time.json").read_text())
    assert budgets == [None, None]  # warm-up and timed run: the probe picks its own
    assert numbers["deer"]["token_budget"] == CPU_TOKEN_BUDGET and numbers["settings"]["token_budget"] is None
    assert f"DEER token budget {CPU_TOKEN_BUDGET} padded tokens per batch (the probe default)" in \
        (tmp_path / "default" / "compute_time.md").read_text()

    budgets.clear()
    invoke([*args, "--token-budget", "300", "--out", str(tmp_path / "given")])
    numbers = json.loads((tmp_path / "given" / "compute_time.json").read_text())
    assert budgets == [300, 300]  # the warm-up too warms the timed configuration
    assert numbers["deer"]["token_budget"] == 300 and numbers["settings"]["token_budget"] == 300


# -- bug 8 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["agreement", "--probes", "deer,bear,lama", "--bootstrap", "0"],
    ["token-bias", "--probes", "deer,bear"],
    ["screen", "--reference", "bear"],
])
def test_each_experiment_opens_each_model_once(command, experiment_kg_dir, tiny_clm_dir, second_clm_dir, tmp_path, model_loads,
                                               stand_in_references):
    invoke([*command, "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
            "--subset", "10", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert model_loads["loads"] == {str(tiny_clm_dir): 1, str(second_clm_dir): 1}
    assert model_loads["fingerprints"] == 2


def test_agreement_single_token_opens_each_model_once(experiment_kg_dir, tiny_clm_dir, second_clm_dir, tmp_path, model_loads):
    """Its tokenizer restricts the queries, then the same open model runs the probes."""
    pytest.importorskip("bear_ref.lama_probe")
    invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
            "--probes", "deer,lama", "--single-token", "--subset", "10", "--bootstrap", "0",
            "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert model_loads["loads"] == {str(tiny_clm_dir): 1, str(second_clm_dir): 1}
    assert model_loads["fingerprints"] == 2


def test_compute_time_opens_its_model_once(tiny_kg_dir, tiny_clm_dir, tmp_path, model_loads):
    invoke(["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train", "--query-sizes", "1,2",
            "--repeats", "1", "--candidates", "4", "--plain-statements", "1", "--deer-queries", "2", "--out", str(tmp_path / "out")])
    assert model_loads["loads"] == {str(tiny_clm_dir): 1} and model_loads["fingerprints"] == 1


def test_compute_time_refuses_a_statement_the_model_cannot_take_before_timing(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """The statements the BEAR scorers are timed on go through the length guard first, as in every run: a name
    too long for the model is refused by name before anything is timed (it was fed to the model mid-experiment)."""
    from experiments import compute_time

    def timed(*args, **kwargs):
        raise AssertionError("timing started before the guard")

    monkeypatch.setattr(compute_time, "time_deer", timed)
    monkeypatch.setattr(compute_time, "deer_probe", timed)
    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[3] = "e3\t" + " ".join(["word"] * 2500) + "\ta thing"
    (tiny_kg_dir / "entities.tsv").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--split", "train", "--query-sizes", "1,2", "--repeats", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "entity 'e3'" in result.output and "its statement continuation is" in result.output, result.output


def test_probe_with_ray_workers_opens_the_model_once_on_the_driver(tiny_kg_dir, tiny_clm_dir, tmp_path, model_loads, monkeypatch):
    """--ray-workers: the driver's one open model gives the workers' store key and then runs the probe
    (the Ray encoding itself is replaced here; tests/test_ray_runs.py runs it where Ray is installed)."""
    from deer.backends.models import LoadedModel
    from experiments import ray_runs

    handed = []

    def encode_on_ray(kg, model_name, templates, *, loaded=None, **options):
        handed.append(loaded)
        return tmp_path / "store"

    monkeypatch.setattr(ray_runs, "encode_entities_on_ray", encode_on_ray)
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--ray-workers", "2",
                                       "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(handed) == 1 and isinstance(handed[0], LoadedModel)
    assert model_loads["loads"] == {str(tiny_clm_dir): 1} and model_loads["fingerprints"] == 1


# -- bug 16 --------------------------------------------------------------------------------------


@pytest.fixture()
def two_runs_checkpoint_10(tmp_path, tiny_clm_dir, second_clm_dir) -> list[Path]:
    """run-a/checkpoint-10 and run-b/checkpoint-10: one name, two training runs (other weights)."""
    folders = [tmp_path / "train" / run / "checkpoint-10" for run in ("run-a", "run-b")]
    for source, folder in zip((tiny_clm_dir, second_clm_dir), folders, strict=True):
        shutil.copytree(source, folder)
    return folders


def _screen(args: list[str], out: Path) -> dict:
    invoke(["screen", *args, "--reference", "bear", "--out", str(out)])
    return json.loads((out / "screen.json").read_text())


def test_screen_names_checkpoints_of_two_runs_apart(experiment_kg_dir, two_runs_checkpoint_10, tmp_path, stand_in_references):
    runs_dir = tmp_path / "runs"
    model_args = [arg for folder in two_runs_checkpoint_10 for arg in ("--model", str(folder))]
    numbers = _screen(["--kg", str(experiment_kg_dir), *model_args, "--runs-dir", str(runs_dir)], tmp_path / "screen")
    expected = ["run-a/checkpoint-10", "run-b/checkpoint-10"]
    assert sorted(row["model"] for row in numbers["leaderboard"]) == expected
    assert sorted(numbers["runs"]) == expected and len(set(numbers["runs"].values())) == 2
    assert len(list(runs_dir.iterdir())) == 2  # one run folder per checkpoint
    for row in numbers["reference_leaderboard"]:  # each name's numbers are its own run's
        assert row["mrr"] == pytest.approx(rank_metrics(load_run(Path(numbers["runs"][row["model"]])).ranks(probe="bear"))["mrr"])

    # The same two run folders read back with --run: the same names (from the models they record).
    folders = [arg for folder in sorted(runs_dir.iterdir()) for arg in ("--run", str(folder))]
    reread = _screen(folders, tmp_path / "screen-again")
    assert sorted(reread["runs"]) == expected
    assert {numbers["runs"][label] for label in expected} == {reread["runs"][label] for label in expected}


def test_screen_runs_of_one_model_in_folders_named_alike_stay_apart(experiment_kg_dir, tiny_clm_dir, tmp_path, stand_in_references):
    """--run x/run --run y/run, both of one model: two rows, named by as much of their folders as tells them apart."""
    invoke(["screen", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--reference", "bear",
            "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "first")])
    (made,) = (tmp_path / "runs").iterdir()
    copies = [shutil.copytree(made, tmp_path / parent / "run") for parent in ("x", "y")]
    numbers = _screen([arg for folder in copies for arg in ("--run", str(folder))], tmp_path / "screen")
    label = Path(tiny_clm_dir).name
    assert sorted(numbers["runs"]) == [f"{label} (x/run)", f"{label} (y/run)"]
    assert len(numbers["leaderboard"]) == len(numbers["reference_leaderboard"]) == 2


def test_run_screen_refuses_two_runs_under_one_name(experiment_kg_dir, two_runs_checkpoint_10, tmp_path, stand_in_references):
    """Through the Python API: runs read back alike ('checkpoint-10') are refused, not mixed up (the
    reference rows were looked up by name); label_runs_apart names them apart."""
    model_args = [arg for folder in two_runs_checkpoint_10 for arg in ("--model", str(folder))]
    _screen(["--kg", str(experiment_kg_dir), *model_args, "--runs-dir", str(tmp_path / "runs")], tmp_path / "screen")
    runs = [load_run(folder) for folder in sorted((tmp_path / "runs").iterdir())]
    assert [run.label for run in runs] == ["checkpoint-10", "checkpoint-10"]
    with pytest.raises(ValueError, match="runs share a label"):
        run_screen(runs, tmp_path / "api", reference="bear")
    label_runs_apart(runs)
    numbers = run_screen(runs, tmp_path / "api", reference="bear")
    assert sorted(row["model"] for row in numbers["reference_leaderboard"]) == ["run-a/checkpoint-10", "run-b/checkpoint-10"]
    assert {row["model"]: row["mrr"] for row in numbers["reference_leaderboard"]} == pytest.approx(
        {run.label: rank_metrics(run.ranks(probe="bear"))["mrr"] for run in runs})


def test_ray_workers_encode_only_prompts_that_fit_as_the_run_will_cut_them(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """--ray-workers encodes the entities before the run: the run's length guard comes first, so a tail prompt
    the model cannot take is refused before any worker starts, and with --long-prompts truncate-descriptions
    the workers get the descriptions cut as the run cuts them (their vectors are the ones the run reads)."""
    from experiments import ray_runs

    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000  # its tail prompt: more than the tiny model's 2048 positions
    (tiny_kg_dir / "entities.tsv").write_text("\n".join(lines) + "\n")
    handed = []

    def encode_on_ray(kg, model_name, templates, *, entities=None, **options):
        handed.append([kg.entity_descriptions[e] for e in entities])
        return tmp_path / "store"

    monkeypatch.setattr(ray_runs, "encode_entities_on_ray", encode_on_ray)
    command = ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--ray-workers", "2", "--k-shot", "2"]
    refused = CliRunner().invoke(main, [*command, "--out", str(tmp_path / "refused")])
    assert refused.exit_code == 1 and "entity 'e2'" in refused.output and "tail prompt" in refused.output, refused.output
    assert handed == []  # no worker was given anything
    cut = CliRunner().invoke(main, [*command, "--long-prompts", "truncate-descriptions", "--out", str(tmp_path / "cut")])
    assert cut.exit_code == 0, cut.output
    metadata = json.loads((tmp_path / "cut" / "metadata.json").read_text())["deer"]
    assert list(metadata["length_guard"]["truncated_descriptions"]) == ["e2"]
    assert len(handed) == 1 and max(len(d) for d in handed[0]) < 2000 * 18  # the cut description, not the whole


def test_ray_workers_guard_the_kg_once_before_the_workers_start(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """s12: with --long-prompts truncate-descriptions, --ray-workers ran the run's length guard again (after the one that
    names the run folder) before encode_entities_on_ray's own check: every tail prompt made and counted three times
    before any worker started.  Now one guard runs before the workers (in either mode), then only that check."""
    from deer.platform import inputs, length_guard
    from experiments import ray_runs
    from tests.conftest import write_tiny_kg

    checks, guards, at_start = [], [], []
    too_long, guard = length_guard.LengthCheck.too_long, length_guard.guard_lengths

    def counted(self, backend, limit):
        checks.extend([self.kind] if self.kind == "tail prompt" else [])
        return too_long(self, backend, limit)

    def guarded(*args, **kwargs):  # the tail prompts' checks each guard makes
        before = len(checks)
        try:
            return guard(*args, **kwargs)
        finally:
            guards.append(len(checks) - before)

    def starting(*args, **kwargs):
        at_start.append((list(guards), len(checks)))
        raise RuntimeError("the workers would start here")

    monkeypatch.setattr(length_guard.LengthCheck, "too_long", counted)
    for module in (inputs, length_guard):
        monkeypatch.setattr(module, "guard_lengths", guarded)
    monkeypatch.setattr(ray_runs, "ray_session", starting)
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    long_kg = write_tiny_kg(tmp_path / "long_kg")
    lines = (long_kg / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000  # cut with truncate-descriptions
    (long_kg / "entities.tsv").write_text("\n".join(lines) + "\n")
    for kg, mode in ((tiny_kg_dir, "error"), (long_kg, "truncate-descriptions")):
        checks.clear(), guards.clear(), at_start.clear()
        CliRunner().invoke(main, ["probe", "--kg", str(kg), "--model", str(tiny_clm_dir), "--long-prompts", mode,
                                  "--ray-workers", "2", "--out", str(tmp_path / mode)])
        ((guarded_before, checked_before),) = at_start  # the workers were reached
        assert len(guarded_before) == 1 and checked_before == guarded_before[0] + 1, (mode, guarded_before, checked_before)


def test_probe_series_opens_each_model_as_its_loading_object_says(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """probe_series opened each model with its own dtype=/device= keywords ('auto') and handed run_probes the opened
    model, so a loading=ModelLoading(dtype=...) given to it was dropped without a word; a keyword set beside it is refused."""
    from deer.platform.inputs import as_query_set
    from deer.platform.run_options import ModelLoading
    from deer.platform.templates import PromptTemplates
    from deer.platform.validate import OptionError
    from experiments.runs import probe_series

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    queries = as_query_set(str(tiny_kg_dir))
    (run,) = probe_series(queries, [str(tiny_clm_dir)], ["deer"], PromptTemplates(k_shot=2), loading=ModelLoading(dtype="bfloat16"),
                          runs_dir=tmp_path / "runs", log=lambda *_: None)
    assert run.metadata["model"]["dtype"] == "bfloat16"
    with pytest.raises(OptionError, match="dtype='float16': given beside loading="):
        probe_series(queries, [str(tiny_clm_dir)], ["deer"], PromptTemplates(k_shot=2), loading=ModelLoading(), dtype="float16")


def test_a_scorer_or_probe_named_twice_is_run_and_tabled_once(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """compute-time timed `--scorers bear_ref,bear_ref` twice (two table rows for one scorer with other totals, its JSON
    keeping one), and token-bias `--probes deer,deer` listed DEER's correlation twice: a name now counts once."""
    import deer
    from experiments import compute_time

    plans = []

    def capture(kg, loaded, templates, out_dir, plan, **kwargs):
        plans.append(plan)
        raise KeyboardInterrupt  # the plan is all this test reads: stop before any timing

    monkeypatch.setattr(compute_time, "run_compute_time", capture)
    CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                              "--scorers", "bear_ref,bear_ref", "--out", str(tmp_path / "time")])
    assert [list(plan.scorers) for plan in plans] == [["bear_ref"]]

    deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, out=tmp_path / "run", show_progress=False)
    invoke(["token-bias", "--run", str(tmp_path / "run"), "--probes", "deer,deer", "--out", str(tmp_path / "tb")])
    rows = json.loads((tmp_path / "tb" / "token_bias.json").read_text())["correlations"]
    assert [row["probe"] for row in rows] == ["deer"]
