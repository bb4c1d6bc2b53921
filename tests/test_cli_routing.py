"""Which path a --kg takes, through the CLI (issue 21, bugs 2 and 13): a JSONL KG folder is a KG, not
LAMA; a cloze benchmark refuses, by name and before any model loads, the options it cannot honour."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import deer
from deer.backends import models
from experiments.cli import main
from kg_data.errors import KGNotFoundError
from kg_data.load import dataset_kind
from tests.kg_folders import write_jsonl_kg


def _invoke(args):
    result = CliRunner().invoke(main, args)
    return result


def test_a_jsonl_kg_folder_is_a_kg_and_lama_names_are_benchmarks(tmp_path):
    assert dataset_kind(write_jsonl_kg(tmp_path / "kg")) == "kg"
    assert (dataset_kind("lama"), dataset_kind("bear-big"), dataset_kind("wn18rr")) == ("lama", "bear", "kg")


def test_a_jsonl_kg_runs_through_probe_bear_lama_and_agreement(tmp_path, tiny_clm_dir):
    """Bug 13: any folder with relations.jsonl went to the LAMA reader in the CLI and failed after loading
    the model (`relations.jsonl:1: missing key(s): relation, template`)."""
    kg = write_jsonl_kg(tmp_path / "kg")
    common = ["--kg", str(kg), "--model", str(tiny_clm_dir), "--k-shot", "2", "--out", str(tmp_path / "run")]
    for probe in ("deer", "bear", "lama"):
        result = _invoke(["probe", "--probe", probe, *common])
        assert result.exit_code == 0, result.output
        assert probe in result.output
    result = _invoke(["experiment", "agreement", "--run", str(tmp_path / "run"), "--bootstrap", "0", "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    pairs = {row["pair"] for row in json.loads((tmp_path / "a" / "agreement.json").read_text())["pairs"]}
    assert pairs == {"deer vs lama", "deer vs bear", "bear vs lama"}


BENCHMARK_CASES = [("lama", ["--k-shot", "3"]), ("lama", ["--probe", "lama,deer", "--subset", "2"]), ("bear", ["--probe", "bear"]),
                   ("bear-big", ["--backend", "plain", "--no-cache"]), ("lama", ["--ray-workers", "2"])]


@pytest.mark.parametrize(("kg", "option"), BENCHMARK_CASES)
def test_deer_probe_on_a_cloze_benchmark_says_to_type_deer_cloze_before_loading(kg, option, monkeypatch):
    """`deer probe --kg lama|bear|bear-big` was run as `deer cloze` (0.1's spelling, read until 0.3; `deer bear|lama --kg`
    too); it is a usage error now naming that command, with the probes given, before any model loads."""
    import experiments.benchmarks as benchmarks

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded or a benchmark run")

    monkeypatch.setattr(models, "load_model", no_loading)
    monkeypatch.setattr(benchmarks, "probe_benchmark", no_loading)
    result = _invoke(["probe", "--kg", kg, *option])
    probes = option[option.index("--probe") + 1] if "--probe" in option else "deer"
    assert result.exit_code == 2, result.output
    assert (f"--kg {kg} is a cloze benchmark, not a KG: type `deer cloze --dataset {kg} --probes {probes}` "
            "(--subset is its --max-facts)") in result.output


def test_no_cache_reaches_the_benchmark_path(monkeypatch):
    """--no-cache is honoured there now: the benchmark's prompt store (LAMA's vocabulary) is not used."""
    import experiments.benchmarks

    seen = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments.benchmarks, "probe_benchmark", record)
    for flags, cache in (([], True), (["--no-cache"], False)):
        result = _invoke(["cloze", "--dataset", "lama", *flags])
        assert result.exit_code == 130 and seen["cache"] is cache, result.output


def test_the_python_api_names_the_benchmark_path():
    """Bug 2: deer.probe("lama") raised an unrelated 'unknown KG' error."""
    with pytest.raises(KGNotFoundError, match="'lama' is a cloze benchmark .LAMA format., not a KG: probe it with `deer cloze"):
        deer.probe("lama", "smollm2-135m")  # a name: the KG is refused before any model loads


@pytest.mark.parametrize("probe", ["deer", "bear", "lama"])
def test_the_benchmark_path_honours_the_backend(probe, monkeypatch):
    """--backend now reaches the cloze benchmarks (deer.runner.run_cloze runs on the backend seam)."""
    import experiments.benchmarks as benchmarks

    seen = {}

    def recorded(dataset, model, **options):
        seen.update(options, dataset=dataset)
        raise SystemExit(0)

    monkeypatch.setattr(benchmarks, "probe_benchmark", recorded)
    _invoke(["cloze", "--dataset", "lama", "--probes", probe, "--backend", "plain", "--max-facts", "2"])
    assert (seen["dataset"], seen["backend"], seen["selection"].max_facts, seen["probes"]) == ("lama", "plain", 2, [probe])


def test_lamas_single_token_ranks_get_their_own_folder(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """`deer probe --probe lama --probe-option single_token=true` wrote into the default folder of the full query
    set (a restricted spec there), so a later `deer probe` with the same settings was refused, and the single-token
    run made again was refused in its own folder.  It has its own folder now, run again into, with DEER's run beside it."""
    monkeypatch.chdir(tmp_path)
    common = ["--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2"]
    probe_spelling = _invoke(["probe", "--probe", "lama", "--probe-option", "single_token=true", *common])
    assert probe_spelling.exit_code == 0, probe_spelling.output
    deer_run = _invoke(["probe", *common])
    assert deer_run.exit_code == 0, deer_run.output
    again = _invoke(["probe", "--probe", "lama", "--probe-option", "single_token=true", *common])
    assert again.exit_code == 0, again.output
    folders = sorted(path.name for path in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and folders[1] == folders[0] + "-single-token"
    single = json.loads((tmp_path / "runs" / folders[1] / "metadata.json").read_text())
    assert set(single) == {"lama"} and single["lama"]["single_token"] is True
    assert set(json.loads((tmp_path / "runs" / folders[0] / "metadata.json").read_text())) == {"deer"}


def test_a_ray_address_without_ray_workers_is_refused_before_loading(tiny_kg_dir, monkeypatch):
    """`deer probe --ray-address ADDR` without --ray-workers ran locally, the address dropped without a word (exit 0)."""
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    result = _invoke(["probe", "--kg", str(tiny_kg_dir), "--ray-address", "10.0.0.1:6379"])
    assert result.exit_code == 2 and "--ray-address" in result.output and "--ray-workers" in result.output


@pytest.mark.parametrize("command", [["probe"], ["probe", "--probe", "bear"], ["probe", "--probe", "lama"], ["bear-dataset"], ["experiment", "compute-time"],
                                     ["experiment", "training-demo"]])
def test_a_one_model_command_refuses_a_second_model_instead_of_dropping_the_first(command, monkeypatch):
    """`deer probe --model A --model B` (as `deer cloze` and `deer experiment agreement` take several) probed B alone and
    exited 0, A dropped without a word (click keeps an option's last value)."""
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    result = _invoke([*command, "--model", "first-model", "--model", "second-model"])
    assert result.exit_code == 2 and "--model" in result.output
    assert "first-model" in result.output and "second-model" in result.output


@pytest.mark.parametrize("args", [["bear"], ["bear", "--pll-variant", "original", "--kg", "wn18rr"], ["bear", "--help"],
                                  ["lama"], ["lama", "--single-token", "--with-deer"], ["lama", "--help"]])
def test_0_1s_kg_commands_say_what_to_type_instead(args, monkeypatch):
    """`deer bear` and `deer lama` (0.1's spellings of `deer probe --probe bear|lama`, read until 0.3) are gone: a usage
    error naming the `deer probe` spelling of each of their options, not click's "No such command", before any work."""
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    result = _invoke(args)
    assert result.exit_code == 2, result.output
    assert f"`deer {args[0]}` is gone (0.1's spelling): type `deer probe --probe {args[0]}` (" in result.output
    spelled = {"bear": ["--pll-variant X is --probe-option pll_variant=X"],
               "lama": ["--with-deer is --probe lama,deer", "--single-token is --probe-option single_token=true"]}
    assert all(option in result.output for option in spelled[args[0]])
    assert args[0] not in main.commands  # nor listed by --help
