"""A third probe added from outside: one module (tests/shortest_name_probe.py, under 60 lines) and its
registration, with no edit anywhere else, runs through the Python API, `deer probe --probe NAME`,
the run folder, `join_results` and `deer experiment agreement` -- and, on a cloze benchmark, through
`deer cloze --probes` (the same runner and probe seam for both task shapes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from transformers import AutoTokenizer

import deer
from deer import probes
from deer.backends.models import as_loaded_model
from deer.platform.result import load_results
from deer.runner import run_probe
from experiments.cli import main
from kg_data.load import load_kg
from kg_data.queries import build_queries
from tests.ranking_oracle import rank_of

MODULE = Path(__file__).with_name("shortest_name_probe.py")


@pytest.fixture()
def shortest_registered(tmp_path, monkeypatch):
    """Register the probe as another package does: a distribution whose metadata declares a
    ``deer.probes`` entry point, found on sys.path (here a dist-info folder written for the test)."""
    monkeypatch.setattr(probes, "_REGISTERED", dict(probes._REGISTERED))  # forget it again after the test
    dist = tmp_path / "site" / "shortest_probe-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shortest-probe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[deer.probes]\nshortest = tests.shortest_name_probe:ShortestNameProbe\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def _invoke(args):
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_the_probe_is_one_small_module():
    assert len(MODULE.read_text().splitlines()) <= 60


def test_an_entry_point_registers_it(shortest_registered):
    assert "shortest" in probes.probe_names()
    assert probes.get_probe("shortest").options == {"by": "characters"}
    with pytest.raises(Exception, match="the shortest probe has no such option .its options: by."):
        run_probe("shortest", "wn18rr", ("model", "tokenizer"), colour="red")  # k_shot= etc. are the runner's own


def test_it_runs_through_the_api_and_ranks_as_its_rule_says(shortest_registered, tiny_kg_dir, tiny_clm):
    model, tokenizer = tiny_clm
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    result = run_probe("shortest", queries, as_loaded_model(model, tokenizer), by="words", show_progress=False)
    names = [queries.kg.entity_names[e] for e in queries.candidates]
    scores = -np.asarray([len(n.split()) for n in names], dtype=np.float64)
    expected = [rank_of(scores, gold, others) for gold, others in zip(queries.gold, queries.filter_tails, strict=True)]
    assert result.probe == "shortest" and result.table["shortest_rank_filtered"].tolist() == expected
    assert result.metadata["rule"] == "shorter name first, by words" and "hit@10" in result.metrics.to_dict()["filtered"]


def test_it_runs_through_the_cli_the_run_folder_join_results_and_agreement(shortest_registered, tiny_kg_dir, tiny_clm_dir,
                                                                          tmp_path):
    out = tmp_path / "run"
    common = ["--kg", str(tiny_kg_dir), "--split", "train", "--model", str(tiny_clm_dir), "--k-shot", "2", "--out", str(out)]
    printed = _invoke(["probe", *common, "--probe", "shortest", "--probe-option", "by=words"]).output
    assert "shortest" in printed
    _invoke(["probe", *common, "--no-cache"])  # DEER into the same folder
    results = load_results(out)
    assert set(results) == {"deer", "shortest"}
    table = deer.join_results(list(results.values()))
    assert {"deer_rank_filtered", "shortest_rank_filtered"} <= set(table.columns)
    assert results["shortest"].metadata["rule"] == "shorter name first, by words"

    agreement = tmp_path / "agreement"
    _invoke(["experiment", "agreement", "--run", str(out), "--probes", "deer,shortest", "--bootstrap", "0", "--out", str(agreement)])
    pairs = json.loads((agreement / "agreement.json").read_text())["pairs"]
    assert [row["pair"] for row in pairs] == ["deer vs shortest"]
    assert pairs[0]["n"] == len(table)
    # ... and the experiment runs the probe itself when asked to
    _invoke(["experiment", "agreement", "--kg", str(tiny_kg_dir), "--split", "train", "--model", str(tiny_clm_dir),
             "--probes", "deer,shortest", "--bootstrap", "0", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "a2")])
    assert json.loads((tmp_path / "a2" / "agreement.json").read_text())["pairs"][0]["pair"] == "deer vs shortest"


def test_listing_probes_imports_no_probe_module(shortest_registered, monkeypatch):
    """The registry names an entry point's probe without importing its module; using it imports it."""
    monkeypatch.delitem(sys.modules, "tests.shortest_name_probe", raising=False)
    assert "shortest" in probes.probe_names()
    assert "tests.shortest_name_probe" not in sys.modules
    probes.get_probe("shortest")
    assert "tests.shortest_name_probe" in sys.modules


def test_it_runs_on_a_cloze_benchmark_through_deer_cloze(shortest_registered, tiny_clm_dir, tmp_path):
    from bear_ref.cloze_scoring import single_token_words
    from kg_data.cloze import lama_cloze_task
    from kg_data.lama import load_lama
    from tests.benchmark_folders import write_lama

    lama, out = write_lama(tmp_path / "lama"), tmp_path / "cloze"
    _invoke(["cloze", "--dataset", str(lama), "--model", str(tiny_clm_dir), "--probes", "deer,shortest", "--bootstrap", "0",
             "--no-cache", "--out", str(out)])
    table = pd.read_parquet(out / "cloze" / "queries.parquet")
    assert [c for c in table.columns if c.endswith("_rank")] == ["deer_rank", "shortest_rank"]
    # The same queries rebuilt: each ranked by the rule over its own candidate set (ties share the mean place).
    tokenizer = AutoTokenizer.from_pretrained(tiny_clm_dir)
    data = load_lama(lama)
    task = lama_cloze_task(data, single_token_words(tokenizer, data.common_vocab, masked=False))
    assert table["fact"].tolist() == [q.fact for q in task.queries] and len(task.queries) > 0
    for q, rank in zip(task.queries, table["shortest_rank"], strict=True):
        scores = -np.asarray([len(label) for label in task.candidate_set(q).labels], dtype=np.float64)
        assert rank == rank_of(scores, q.gold, np.zeros(0, dtype=np.int64))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["shortest"]["relation"]["template"]["overall"]["n"] > 0


def test_a_checkout_without_installing_has_the_built_in_probes(tmp_path):
    """A copy of the packages used through PYTHONPATH, with no installed metadata at all (entry points
    answer nothing): the three built-in probes are there, from the table beside the registry."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parent.parent
    for package in ("deer", "bear_ref", "kg_data"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import importlib.metadata as m; m.entry_points = lambda **kw: []\n"
            "import deer.probes as p; import deer\n"
            f"assert deer.__file__.startswith({str(tmp_path)!r}), deer.__file__\n"
            "print(','.join(p.probe_names())); print(','.join(p.get_probe(n).name for n in ('deer', 'bear', 'lama')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["deer,bear,lama", "deer,bear,lama"]
