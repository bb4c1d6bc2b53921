"""Which path a --kg takes, through the CLI (issue 21, bugs 2 and 13): a JSONL KG folder is a KG, not
LAMA; a cloze benchmark refuses, by name and before any model loads, the options it cannot honour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import deer
from deer.backends import models
from experiments.cli import main
from kg_data.errors import KGNotFoundError
from kg_data.load import dataset_kind
from tests.conftest import TINY_ENTITIES, TINY_RELATIONS, TINY_SPLITS


def write_jsonl_kg(folder: Path) -> Path:
    """The tiny KG in the README's JSONL layout (entities.jsonl, relations.jsonl, train/valid/test.jsonl)."""
    folder.mkdir(parents=True)
    lines = {"entities": [{"id": i, "name": n, "description": d} for i, n, d in TINY_ENTITIES],
             "relations": [{"id": i, "name": n} for i, n in TINY_RELATIONS],
             **{split: [{"head": h, "relation": r, "tail": t} for h, r, t in rows] for split, rows in TINY_SPLITS.items()}}
    for stem, records in lines.items():
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder


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
    for command in ("probe", "bear", "lama"):
        result = _invoke([command, *common])
        assert result.exit_code == 0, result.output
        assert f"{command if command != 'probe' else 'deer'}" in result.output
    result = _invoke(["experiment", "agreement", "--run", str(tmp_path / "run"), "--bootstrap", "0", "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    pairs = {row["pair"] for row in json.loads((tmp_path / "a" / "agreement.json").read_text())["pairs"]}
    assert pairs == {"deer vs lama", "deer vs bear", "bear vs lama"}


@pytest.mark.parametrize("command, option", [("probe", ["--k-shot", "3"]), ("probe", ["--split", "train"]),
                                             ("probe", ["--long-prompts", "truncate-descriptions"]), ("bear", ["--exclude-head"]),
                                             ("lama", ["--template-style", "authors"]), ("probe", ["--ray-workers", "2"])])
def test_options_a_benchmark_cannot_honour_are_refused_by_name_before_loading(command, option, monkeypatch):
    """Bug 2: `deer probe|bear|lama --kg lama|bear|bear-big` dropped these options silently."""
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    result = _invoke([command, "--kg", "lama", *option])
    assert result.exit_code != 0
    assert option[0] in result.output and "not for --kg lama" in result.output


def test_no_cache_reaches_the_benchmark_path(monkeypatch):
    """--no-cache is honoured there now: the benchmark's prompt store (LAMA's vocabulary) is not used."""
    import experiments.benchmarks

    seen = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments.benchmarks, "probe_benchmark", record)
    for flags, cache in (([], True), (["--no-cache"], False)):
        result = _invoke(["probe", "--kg", "lama", *flags])
        assert result.exit_code == 130 and seen["cache"] is cache, result.output


def test_the_python_api_names_the_benchmark_path():
    """Bug 2: deer.probe("lama") raised an unrelated 'unknown KG' error."""
    with pytest.raises(KGNotFoundError, match="'lama' is a cloze benchmark .LAMA format., not a KG: probe it with `deer cloze"):
        deer.probe("lama", "smollm2-135m")  # a name: the KG is refused before any model loads


@pytest.mark.parametrize("command", ["probe", "bear", "lama"])
def test_the_benchmark_path_honours_the_backend(command, monkeypatch):
    """--backend now reaches the cloze benchmarks (deer.runner.run_cloze runs on the backend seam)."""
    import experiments.benchmarks as benchmarks

    seen = {}

    def recorded(dataset, model, **options):
        seen.update(options, dataset=dataset)
        raise SystemExit(0)

    monkeypatch.setattr(benchmarks, "probe_benchmark", recorded)
    result = _invoke([command, "--kg", "lama", "--backend", "plain", "--subset", "2"])
    assert (seen["dataset"], seen["backend"], seen["selection"].max_facts) == ("lama", "plain", 2)
    probe = {"probe": "deer"}.get(command, command)
    assert f"`deer cloze --dataset lama --probes {probe}`" in result.output  # the old spelling says the new one


def test_a_kg_command_on_a_benchmark_is_run_as_deer_cloze(monkeypatch):
    """`deer probe --kg lama` (kept until 0.3) is `deer cloze --dataset lama --probes deer`: the same call reaches
    the benchmark, with every option the two spellings share."""
    import experiments.benchmarks as benchmarks

    calls = []

    def recorded(dataset, model, **options):
        calls.append((dataset, str(model), options))
        raise SystemExit(0)

    monkeypatch.setattr(benchmarks, "probe_benchmark", recorded)
    common = ["--seed", "3", "--dtype", "float32", "--token-budget", "64", "--no-cache", "--out", "somewhere"]
    _invoke(["probe", "--kg", "lama", "--subset", "2", *common])
    _invoke(["cloze", "--dataset", "lama", "--probes", "deer", "--max-facts", "2", *common])
    assert len(calls) == 2 and calls[0] == calls[1]
    assert calls[0][2]["selection"].max_facts == 2 and calls[0][2]["cache"] is False


def test_lamas_single_token_ranks_get_their_own_folder_under_either_spelling(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """`deer probe --probe lama --probe-option single_token=true` wrote into the default folder of the full query
    set (a restricted spec there), so a later `deer probe` with the same settings was refused; `deer lama
    --single-token` named its folder apart.  Both spellings now share that folder, and DEER's run goes beside it."""
    monkeypatch.chdir(tmp_path)
    common = ["--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2"]
    probe_spelling = _invoke(["probe", "--probe", "lama", "--probe-option", "single_token=true", *common])
    assert probe_spelling.exit_code == 0, probe_spelling.output
    deer_run = _invoke(["probe", *common])
    assert deer_run.exit_code == 0, deer_run.output
    lama_spelling = _invoke(["lama", "--single-token", *common])
    assert lama_spelling.exit_code == 0, lama_spelling.output
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


@pytest.mark.parametrize("command", [["probe"], ["bear"], ["lama"], ["bear-dataset"], ["experiment", "compute-time"],
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
