"""One result type (``deer.platform.result.RunResult``) for every run: a KG run of several probes, a cloze
run and the BEAR data-set score each save one folder shape (their table, metrics.json and metadata.json
keyed by probe) and read back as the result they saved; a one-probe view reads as 0.1's ProbeResult."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import deer
from deer.backends.models import open_model
from deer.platform.result import RunResult, load_results
from deer.platform.templates import PromptTemplates
from deer.runner import run_cloze, run_kg, run_probe
from experiments.runs import load_run
from kg_data import build_queries, load_kg
from kg_data.cloze import bear_cloze_task
from tests.test_cloze import hand_built_bear


def _same(first: RunResult, second: RunResult) -> None:
    assert first.probes == second.probes and first.layout == second.layout
    pd.testing.assert_frame_equal(first.table.reset_index(drop=True), second.table.reset_index(drop=True), check_dtype=False)
    for probe in first.probes:
        assert first.metrics_of(probe).to_dict() == second.metrics_of(probe).to_dict()


def test_a_kg_run_of_several_probes_is_one_result_and_reads_back_as_it(tiny_kg_dir, tiny_clm_dir, tmp_path):
    queries, loaded = build_queries(load_kg(str(tiny_kg_dir)), "test"), open_model(str(tiny_clm_dir))
    run = run_kg(["deer", "lama"], queries, loaded, templates=PromptTemplates(k_shot=2), out=tmp_path, show_progress=False)
    assert isinstance(run, deer.RunResult) and deer.ProbeResult is deer.RunResult and run.probes == ["deer", "lama"]
    _same(RunResult.load(tmp_path), run)
    _same(deer.load_result(tmp_path), run)
    assert RunResult.load(tmp_path).spec == run.spec
    # Several probes: each is picked by name; the one-probe shortcuts name them rather than guess.
    for shortcut in ("probe", "metrics", "metadata"):
        with pytest.raises(ValueError, match="deer, lama; pick one"):
            getattr(run, shortcut)
    with pytest.raises(ValueError, match="holds no bear result"):
        run.metrics_of("bear")
    lama = run["lama"]
    assert lama.probe == "lama" and not any(c.startswith("deer_") for c in lama.table.columns)
    assert {"lama_rank_raw", "lama_rank_filtered", "lama_top10", "head", "k_shot_used"} <= set(lama.table.columns)
    np.testing.assert_array_equal(run.ranks("raw", "lama"), lama.ranks("raw"))
    assert lama.metrics["hit@10"] == run.metrics_of("lama")["filtered/hit@10"] == json.loads(
        (tmp_path / "metrics.json").read_text())["lama"]["filtered"]["hit@10"]
    # Every probe's metadata records the few-shot examples each query got, counted once for the run.
    assert run.metadata_of("deer")["k_shot"] == run.metadata_of("lama")["k_shot"]
    # 0.1's per-probe reading, and the experiments' old argument order (with a DeprecationWarning).
    _same(load_results(tmp_path)["deer"], run["deer"])
    with pytest.warns(DeprecationWarning, match="ranks\\(rank_type, probe\\)"):
        old_order = run.ranks("deer", "raw")
    np.testing.assert_array_equal(old_order, run.ranks("raw", "deer"))
    # A one-probe run is the same type, and reads as that probe's.
    alone = run_probe("lama", queries, loaded, templates=PromptTemplates(k_shot=2), show_progress=False)
    assert type(alone) is RunResult and alone.probe == "lama"
    np.testing.assert_array_equal(alone.ranks("filtered"), lama.ranks("filtered"))
    # The experiments read the same folder as the same result, labelled.
    experiment_run = load_run(tmp_path, label="tiny")
    assert experiment_run.label == "tiny" and type(experiment_run) is RunResult
    _same(experiment_run, run)


def test_a_cloze_run_saves_and_reads_back_the_same_folder_shape(tmp_path, tiny_clm_dir):
    loaded = open_model(str(tiny_clm_dir))
    result = run_cloze(bear_cloze_task(hand_built_bear()), loaded, ["deer", "bear"], out=tmp_path, show_progress=False)
    assert result.layout == "queries" and result.probes == ["deer", "bear"]
    assert set(json.loads((tmp_path / "metrics.json").read_text())) == set(json.loads((tmp_path / "metadata.json").read_text())) \
        == {"deer", "bear"}
    stored = RunResult.load(tmp_path)
    _same(stored, result)
    assert stored.metadata_of("bear")["resumed"] is False and stored.metadata_of("bear")["backend"] == "hf"
    bear = result["bear"]
    assert bear.probe == "bear" and "bear_rank" in bear.table and not any(c.startswith("deer_") for c in bear.table.columns)
    assert "relation" in bear.metrics.to_dict() and bear.metrics["relation/template/overall/n"] == len(result.table)


def _snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_holds_one_kind_of_run(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """A cloze run into a KG run's folder (or the BEAR data-set score into a cloze run's) would overwrite that
    run's metrics.json and metadata.json: each is refused by name before any work, and nothing there changes."""
    from click.testing import CliRunner

    import bear_ref
    from experiments.cli import main
    from tests.test_cloze import write_lama

    queries, loaded = build_queries(load_kg(str(tiny_kg_dir)), "test"), open_model(str(tiny_clm_dir))
    kg_run = tmp_path / "kg"
    run_probe("lama", queries, loaded, out=kg_run, show_progress=False)
    before = _snapshot(kg_run)
    lama = write_lama(tmp_path / "lama")
    refused = CliRunner().invoke(main, ["cloze", "--dataset", str(lama), "--model", str(tiny_clm_dir), "--candidates",
                                        "relation", "--probes", "lama", "--bootstrap", "0", "--no-cache", "--out", str(kg_run)])
    assert refused.exit_code != 0 and "already holds a KG probe run (ranks.parquet)" in refused.output, refused.output
    with pytest.raises(ValueError, match="already holds a KG probe run"):
        run_cloze(bear_cloze_task(hand_built_bear()), loaded, ["bear"], out=kg_run, show_progress=False)
    assert _snapshot(kg_run) == before
    cloze_run = tmp_path / "cloze"
    run_cloze(bear_cloze_task(hand_built_bear()), loaded, ["bear"], out=cloze_run, show_progress=False)
    before = _snapshot(cloze_run)
    with pytest.raises(ValueError, match="already holds a cloze run \\(queries.parquet\\)"):
        bear_ref.bear_dataset(hand_built_bear(), loaded, out=cloze_run, show_progress=False)
    with pytest.raises(ValueError, match="holds metadata.json, metrics.json written without a run spec"):
        run_probe("lama", queries, loaded, out=cloze_run, show_progress=False)
    assert _snapshot(cloze_run) == before


def _leaves(tree: dict, path=()):
    for key, value in tree.items():
        yield from _leaves(value, (*path, key)) if isinstance(value, dict) else [((*path, key), value)]


def test_a_cloze_folder_reads_back_with_its_metrics_made_again_from_its_rows(tmp_path):
    """A cloze run's metrics are its table's: reading a folder makes them again from the rows. The committed
    LAMA run (written before results were keyed by probe: one metadata object, kind-first metrics) reads, and
    every number its metrics.json holds is the one made again; a metrics.json that disagrees is refused."""
    import shutil
    from pathlib import Path

    from deer.platform.read_back import StoredFileError

    committed = Path(__file__).parent.parent / "results" / "lama-smollm2"
    result = RunResult.load(committed / "cloze")
    assert result.probes == ["deer", "lama", "bear"] and result.metadata_of("lama")["model"]["name"] == "smollm2-135m"
    old = json.loads((committed / "metrics.json").read_text())  # {kind: {mode: {probe: ...}}}
    leaves = list(_leaves(old))
    assert len(leaves) > 1000
    for (kind, mode, probe, *rest), value in leaves:
        node = result.probe_metrics[probe][kind][mode]
        for key in rest:
            node = node[key]
        assert node == value, (kind, mode, probe, rest)
    folder = tmp_path / "cloze"
    result.save(folder)
    _same(RunResult.load(folder), result)
    stored = json.loads((folder / "metrics.json").read_text())
    stored["lama"]["relation"]["template"]["overall"]["p@1"] += 0.01
    (folder / "metrics.json").write_text(json.dumps(stored))
    with pytest.raises(StoredFileError, match="metrics.json.*disagrees with the metrics of queries.parquet"):
        RunResult.load(folder)
    shutil.rmtree(folder)


def test_a_kg_folders_metrics_are_checked_against_its_ranks_when_read_back(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """A KG probe's raw and filtered metrics (overall and per relation) are made again from the ranks table read
    back: a metrics.json that disagrees (edited, or left behind by a run whose table was rewritten) is refused by
    name, by ``deer.load_result`` and by the experiments' ``load_run``, instead of read as the run's numbers."""
    import shutil

    from deer.platform.read_back import StoredFileError

    queries, loaded = build_queries(load_kg(str(tiny_kg_dir)), "test"), open_model(str(tiny_clm_dir))
    run_kg(["deer", "lama"], queries, loaded, templates=PromptTemplates(k_shot=2), out=tmp_path / "run", show_progress=False)
    _same(deer.load_result(tmp_path / "run"), RunResult.load(tmp_path / "run"))  # as saved: it reads

    def tampered(name, edit):
        folder = tmp_path / name
        shutil.copytree(tmp_path / "run", folder)
        edit(folder)
        return folder

    def edit_metrics(change):
        def edit(folder):
            metrics = json.loads((folder / "metrics.json").read_text())
            change(metrics)
            (folder / "metrics.json").write_text(json.dumps(metrics))
        return edit

    def swap_two_ranks(folder):  # the table rewritten (two queries' lama ranks swapped), metrics.json left as it was
        path = next(folder.glob("ranks.*"))
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        ranks = table["lama_rank_raw"].to_numpy().copy()
        relations = table["relation"].to_numpy()
        first, other = 0, int(np.flatnonzero((ranks != ranks[0]) & (relations != relations[0]))[0])  # overall unchanged
        ranks[[first, other]] = ranks[[other, first]]
        table["lama_rank_raw"] = ranks
        table.to_parquet(path) if path.suffix == ".parquet" else table.to_csv(path, index=False)

    cases = {
        "hit": (edit_metrics(lambda m: m["deer"]["filtered"].update({"hit@10": m["deer"]["filtered"]["hit@10"] + 0.25})),
                "its deer filtered metrics disagree"),
        "relation": (edit_metrics(lambda m: next(iter(m["lama"]["per_relation"].values()))["raw"].update({"mrr": 0.99})),
                     "its lama per_relation metrics disagree"),
        "table": (swap_two_ranks, "its lama per_relation metrics disagree"),
    }
    for name, (edit, message) in cases.items():
        folder = tampered(name, edit)
        for read in (deer.load_result, load_run):
            with pytest.raises(StoredFileError, match=f"metrics.json: {message} with ranks"):
                read(folder)
