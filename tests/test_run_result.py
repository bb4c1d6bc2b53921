"""One result type (``deer.platform.result.RunResult``) for every run: a KG run of several probes, a cloze
run and the BEAR data-set score each save one folder shape (their table, metrics.json and metadata.json
keyed by probe) and read back as the result they saved; a one-probe view reads as that probe's result."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deer
from deer.backends.models import open_model
from deer.platform.result import RunResult, load_results
from deer.platform.templates import PromptTemplates
from deer.runner import run_cloze, run_kg, run_probe
from experiments.runs import load_run, run_probes
from kg_data import build_queries, load_kg
from kg_data.cloze import bear_cloze_task
from tests.benchmark_folders import hand_built_bear
from tests.stored_work import _quiet
from tests.write_faults import WRITE_ERRORS, fail_writes, no_half_files


def _same(first: RunResult, second: RunResult) -> None:
    assert first.probes == second.probes and first.layout == second.layout
    pd.testing.assert_frame_equal(first.table.reset_index(drop=True), second.table.reset_index(drop=True), check_dtype=False)
    for probe in first.probes:
        assert first.metrics_of(probe).to_dict() == second.metrics_of(probe).to_dict()


def test_a_kg_run_of_several_probes_is_one_result_and_reads_back_as_it(tiny_kg_dir, tiny_clm_dir, tmp_path):
    queries, loaded = build_queries(load_kg(str(tiny_kg_dir)), "test"), open_model(str(tiny_clm_dir))
    run = run_kg(["deer", "lama"], queries, loaded, templates=PromptTemplates(k_shot=2), out=tmp_path, show_progress=False)
    assert isinstance(run, deer.RunResult) and run.probes == ["deer", "lama"]
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
    # The per-probe reading; 0.1's argument order (read until 0.3 with a DeprecationWarning) is refused, saying the order.
    _same(load_results(tmp_path)["deer"], run["deer"])
    with pytest.raises(ValueError, match="rank_type must be 'filtered' or 'raw', got 'deer': ranks\\(rank_type, probe\\)"):
        run.ranks("deer", "raw")
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
    from tests.benchmark_folders import write_lama

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


@pytest.fixture(scope="module")
def three_layouts(tmp_path_factory, tiny_clm_dir) -> dict[str, RunResult]:
    """A result of each layout, in memory: a KG run of two probes, a cloze run, a BEAR data-set score."""
    import bear_ref
    from tests.conftest import write_tiny_kg

    loaded = open_model(str(tiny_clm_dir))
    queries = build_queries(load_kg(str(write_tiny_kg(tmp_path_factory.mktemp("kg")))), "test")
    return {"ranks": run_kg(["deer", "lama"], queries, loaded, templates=PromptTemplates(k_shot=2), show_progress=False),
            "queries": run_cloze(bear_cloze_task(hand_built_bear()), loaded, ["deer", "bear"], show_progress=False),
            "instances": bear_ref.bear_dataset(hand_built_bear(), loaded, show_progress=False)}


def _without_file(name):
    return lambda folder: (folder / name).unlink()


def _without_entry(name, probe):
    def edit(folder):
        stored = json.loads((folder / name).read_text())
        del stored[probe]
        (folder / name).write_text(json.dumps(stored))
    return edit


LACKING = {  # layout -> {what is lacking: (how, the file named)}
    "ranks": {"metrics.json": (_without_file("metrics.json"), "metrics.json"),
              "metadata.json": (_without_file("metadata.json"), "metadata.json"),
              "lama's metrics": (_without_entry("metrics.json", "lama"), "metrics.json"),
              "deer's metadata": (_without_entry("metadata.json", "deer"), "metadata.json")},
    "queries": {"metrics.json": (_without_file("metrics.json"), "metrics.json"),
                "metadata.json": (_without_file("metadata.json"), "metadata.json")},
    "instances": {"metrics.json": (_without_file("metrics.json"), "metrics.json"),
                  "metadata.json": (_without_file("metadata.json"), "metadata.json"),
                  "bear's metadata": (_without_entry("metadata.json", "bear"), "metadata.json")},
}


@pytest.mark.parametrize(("layout", "lacking"), [(layout, lacking) for layout, cases in LACKING.items() for lacking in cases])
def test_a_folder_lacking_a_file_its_layout_needs_is_refused_by_name(three_layouts, tmp_path, layout, lacking):
    """A folder holding a run's table without its metrics.json or metadata.json (a run that failed before writing
    them, or a file removed), or without a probe's entry there, was read as a result with empty metrics and no word.
    Every file and entry each layout needs (9 cases) is refused by name, with the folder."""
    from deer.platform.read_back import StoredFileError

    folder = tmp_path / "run"
    three_layouts[layout].save(folder)
    _same(RunResult.load(folder), three_layouts[layout])  # whole, it reads
    edit, named = LACKING[layout][lacking]
    edit(folder)
    for read in (RunResult.load, deer.load_result, load_results):
        with pytest.raises(StoredFileError, match=f"{folder / named}: (missing, though {folder} holds|has no entry for)"):
            read(folder)


def _files(folder) -> dict:
    return {} if not folder.exists() else {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                                           if p.is_file()}


SAVE_PLACES = {  # layout -> the files a save writes (by name; "" for every file and folder in the run folder)
    "ranks": ("ranks.parquet", "run_spec.json", "metrics.json", "metadata.json", ".lock", ""),
    "queries": ("queries.parquet", "metrics.json", "metadata.json", ".lock", ""),
    "instances": ("instances.parquet", "metrics.json", "summary.md", "metadata.json", ".lock", ""),
}
BEFORE = {  # layout -> {what the folder held before: (what is saved first, what is saved then, failing)}
    "ranks": {"fresh": (None, None), "another probe": ("deer", "lama"), "the same probe": (None, "deer")},
    "queries": {"fresh": (None, None), "a run before": (None, None)},
    "instances": {"fresh": (None, None), "a run before": (None, None)},
}
SAVE_CASES = [(layout, before, place, code) for layout, places in SAVE_PLACES.items() for before in BEFORE[layout]
              for place in places for code in WRITE_ERRORS]


@pytest.mark.parametrize(("layout", "before", "place", "code"), SAVE_CASES)
def test_a_save_that_fails_names_the_file_and_leaves_no_half_result(three_layouts, tmp_path, monkeypatch, layout, before,
                                                                    place, code):
    """With no space, no permission or a read-only disk, a save failed with '[Errno 28] No space left on device'
    naming no file, and left a ranks table without metrics.json or metadata.json, which read back as a result. Every
    cause x every file a save writes x what the folder held (a fresh folder; another probe's or the same probe's
    ranks; a run before): the error names the file, and the folder is left as it was (nothing, or the run before,
    which reads back whole): 120 cases."""
    from deer.base.files import WriteError

    result, folder = three_layouts[layout], tmp_path / "run"
    first, then = BEFORE[layout][before]
    if before != "fresh":
        (result[first] if first else result).save(folder)
    saved = result[then] if then else result
    held = _files(folder)
    fail_writes(monkeypatch, folder, WRITE_ERRORS[code], place)
    try:
        saved.save(folder)
    except WriteError as error:
        failed = error
    else:
        failed = None
    monkeypatch.undo()
    writes_nothing = (code == "ENOSPC" and place == ".lock") or (place == "run_spec.json" and before != "fresh")
    assert (failed is None) == writes_nothing, (failed, writes_nothing)  # a lock file takes no space; a spec there stays
    if failed is None:
        return
    assert failed.errno == WRITE_ERRORS[code] and str(folder / place) in str(failed), str(failed)
    assert _files(folder) == held and no_half_files(tmp_path) == []
    if before == "fresh":
        with pytest.raises(ValueError, match="holds no probe result"):
            deer.load_result(folder)
    else:
        _same(deer.load_result(folder), result[first] if first else result)


PART_PLACES = ("key.json", ".parquet", "")


@pytest.mark.parametrize("code", list(WRITE_ERRORS))
@pytest.mark.parametrize("place", PART_PLACES)
@pytest.mark.parametrize("run", ["cloze", "bear-dataset"])
def test_a_resume_part_that_cannot_be_written_is_named_and_leaves_no_result(tiny_clm_dir, tmp_path, monkeypatch, run, place,
                                                                            code):
    """A run whose resume parts (``parts/<key>/...`` in its out folder) cannot be written fails naming the part, and
    leaves no folder a later read takes for a result (2 runs x 3 places x 3 causes: 18 cases)."""
    import bear_ref
    from deer.base.files import WriteError

    loaded, folder = open_model(str(tiny_clm_dir)), tmp_path / "run"
    fail_writes(monkeypatch, folder / "parts", WRITE_ERRORS[code], place)
    with pytest.raises(WriteError) as raised:
        if run == "cloze":
            run_cloze(bear_cloze_task(hand_built_bear()), loaded, ["bear"], out=folder, show_progress=False)
        else:
            bear_ref.bear_dataset(hand_built_bear(), loaded, out=folder, show_progress=False)
    monkeypatch.undo()
    assert raised.value.errno == WRITE_ERRORS[code] and str(folder / "parts") in str(raised.value)
    assert place in raised.value.path.name and no_half_files(tmp_path) == []
    with pytest.raises(ValueError, match="holds no probe result"):
        deer.load_result(folder)


def test_a_kg_run_whose_metrics_cannot_be_written_names_the_file_and_leaves_no_result(tiny_kg_dir, tiny_clm_dir, tmp_path,
                                                                                      monkeypatch):
    """The report's case: the ranks table written, then no room for metrics.json: exit 1 with '[Errno 28] No space left
    on device', and a folder read back as a result with empty metrics. The error names the file; nothing is left."""
    from deer.base.files import WriteError

    queries, loaded = build_queries(load_kg(str(tiny_kg_dir)), "test"), open_model(str(tiny_clm_dir))
    fail_writes(monkeypatch, tmp_path / "run", WRITE_ERRORS["ENOSPC"], "metrics.json")
    with pytest.raises(WriteError, match=f"could not write {tmp_path / 'run' / 'metrics.json'} .*No space left on device"):
        run_probe("lama", queries, loaded, out=tmp_path / "run", show_progress=False)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="holds no probe result"):
        deer.load_result(tmp_path / "run")


def _metadata_of_shifted_runs_fails(monkeypatch):
    """Writing a metadata.json that records the shifted backend raises, as a full disk would: a save stopped after
    the run's table (and metrics) were written, before its metadata."""
    from pathlib import Path

    import deer.base.files as files

    real = files.atomic_write_bytes

    def write(path, data, *rest):
        if Path(path).name == "metadata.json" and b'"backend": "shifted"' in data:
            raise OSError(28, "No space left on device")
        real(path, data, *rest)

    monkeypatch.setattr(files, "atomic_write_bytes", write)


def test_a_kg_save_stopped_before_its_metadata_leaves_no_ranks_under_the_old_metadata(shifted, tiny_kg_dir, tiny_clm_dir,
                                                                                       tmp_path, monkeypatch):
    """s12-b: a probe's save wrote its ranks and metrics, then metadata.json; stopped in between, the new ranks lay
    under the old run's metadata, and run_probes reused them as that run's (another backend's ranks, logged as reused).
    Now the probe's old metadata entry goes first and its new one last, and a save that fails puts the folder back as
    it was (issue 47): the run before's ranks, under its own metadata, are reused as its."""
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded, folder = open_model(str(tiny_clm_dir)), tmp_path / "run"
    hf_ranks = run_probes(queries, loaded, ["bear"], folder, PromptTemplates(), log=_quiet).ranks("filtered", "bear").tolist()
    with monkeypatch.context() as patched:
        _metadata_of_shifted_runs_fails(patched)
        with pytest.raises(OSError):
            run_kg(["bear"], queries, loaded, backend="shifted", out=folder, show_progress=False)
    again = run_probes(queries, loaded, ["bear"], folder, PromptTemplates(), log=_quiet)
    assert again.experiment["reused"] == ["bear"] and again.ranks("filtered", "bear").tolist() == hf_ranks


def test_a_bear_dataset_save_stopped_before_its_metadata_is_no_finished_run(shifted, tiny_clm_dir, tmp_path, monkeypatch):
    """s12-b: `deer bear-dataset` wrote its instances table, then metadata.json; a run into the folder of another that
    stopped in between left its table under the other's metadata, and --bear-run took that table as the other run's.
    Now metadata.json (what marks a finished run) is removed first and written last: --bear-run refuses the folder.
    (A run made otherwise is now refused before it starts, so the run that stops here is the folder's own run again.)
    Since issue 47 a save that fails puts the folder back as it was: the run before, whole, is what --bear-run reads."""
    import deer
    from bear_ref.benchmark import bear_scoring, stored_bear_table
    from bear_ref.dataset import run_bear_dataset
    from deer.backends import open_backend
    from deer.backends.models import open_model
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded, out = open_model(str(tiny_clm_dir)), tmp_path / "out"
    shifted = run_bear_dataset(data, loaded, out, {"relations": None}, backend="shifted", show_progress=False)
    scoring = bear_scoring(open_backend("shifted", loaded))
    assert stored_bear_table(out, data, loaded, scoring)["rank"].tolist() == shifted.table["rank"].tolist()
    with monkeypatch.context() as patched:
        _metadata_of_shifted_runs_fails(patched)
        with pytest.raises(OSError):
            run_bear_dataset(data, loaded, out, {"relations": None}, backend="shifted", show_progress=False)
    assert (out / "metadata.json").exists() and deer.load_result(out).metadata["backend"] == "shifted"
    assert stored_bear_table(out, data, loaded, scoring)["rank"].tolist() == shifted.table["rank"].tolist()


def test_a_cloze_save_stopped_before_its_metadata_reads_back_no_other_runs_metadata(shifted, tiny_clm_dir, tmp_path,
                                                                                      monkeypatch):
    """s12-b: a cloze run's save wrote its table and metrics, then metadata.json; stopped in between, deer.load_result gave
    the new run's numbers under the old run's metadata (its model, backend).  Now the old metadata.json goes first, and
    since issue 47 a save that fails puts the folder back as it was: the run before, whole, its rows under its metadata."""
    import deer
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.benchmark_folders import write_dataset

    task = bear_cloze_task(load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini"))))
    loaded, out = open_model(str(tiny_clm_dir)), tmp_path / "cloze"
    before = run_cloze(task, loaded, ["bear"], out, show_progress=False)
    assert deer.load_result(out).metadata_of("bear")["backend"] == "hf"
    with monkeypatch.context() as patched:
        _metadata_of_shifted_runs_fails(patched)
        with pytest.raises(OSError):
            run_cloze(task, loaded, ["bear"], out, backend="shifted", show_progress=False)
    back = deer.load_result(out)
    assert back.metadata_of("bear")["backend"] == "hf" and back.table["bear_rank"].tolist() == before.table["bear_rank"].tolist()


# -- results saved into one folder at once ---------------------------------------------------------


@pytest.fixture()
def tiny_result(tiny_kg_dir, tiny_clm_dir) -> RunResult:
    import deer
    from deer.platform.templates import PromptTemplates
    from kg_data import build_queries
    from kg_data.textual import load_textual_kg

    kg = load_textual_kg(tiny_kg_dir)
    return deer.probe(build_queries(kg, "test"), str(tiny_clm_dir), templates=PromptTemplates(k_shot=2), cache=False,
                      show_progress=False)


def as_probe(result: RunResult, probe: str) -> RunResult:
    """The same result under another probe name (its columns renamed)."""
    table = result.table.rename(columns={c: c.replace("deer_", f"{probe}_", 1) for c in result.table.columns})
    return RunResult.of_probe(probe, table, result.metrics, result.metadata, spec=result.spec)


def save_at_once(results: list[RunResult], folder: Path) -> None:
    """Save each result from its own thread, all released at the same moment."""
    start, errors = threading.Barrier(len(results)), []

    def save(result: RunResult) -> None:
        try:
            start.wait()
            result.save(folder)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=save, args=(result,)) for result in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_results_saved_at_once_all_end_up_in_the_folder(tmp_path, tiny_result):
    probes = [f"p{i}" for i in range(6)]
    for attempt in range(3):
        folder = tmp_path / f"run{attempt}"
        save_at_once([as_probe(tiny_result, probe) for probe in probes], folder)
        assert set(load_results(folder)) == set(probes)
        for name in ("metrics.json", "metadata.json"):
            assert set(json.loads((folder / name).read_text())) == set(probes)
        # exactly the results: no temp file, and no lock file either (its holder removes it; kg_data.locks)
        assert {p.name for p in folder.iterdir()} == {"ranks.parquet", "metrics.json", "metadata.json", "run_spec.json"}
