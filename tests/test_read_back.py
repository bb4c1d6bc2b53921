"""Every value read back from disk is checked before use: a bad stored file is named in a warning, set
aside and its work done again (never trusted, never fatal to a later run), and a bad file in a run
folder given as input is refused by name.  Each test runs the CLI on the tiny fixtures, damages what
the first run stored (``tests.store_faults``: the only module that knows the layout) and runs again:
exit 0, one warning per damaged file naming it, the same numbers as the first run, the file set aside,
and a third run silent (the cache healed)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import deer
from deer.base.files import write_table
from deer.platform.read_back import StoredFileError, read_stored_table
from deer.platform.result import RunResult
from deer.platform.stores import EmbeddingStore, StoreDamaged
from deer.platform.validate import DeerWarning
from experiments.cli import main
from tests.benchmark_folders import write_dataset, write_lama
from tests.conftest import write_tiny_kg
from tests.store_faults import (
    TABLE_FAULTS,
    VECTOR_FAULTS,
    corrupt_resume_parts,
    corrupt_stored_vectors,
    damage_bytes,
    resume_parts,
    set_aside_resume_parts,
    set_aside_vector_files,
)


def resumed_probes(folder) -> list[str]:
    """The probes a saved cloze run read back from its parts (its metadata.json, by probe)."""
    result = RunResult.load(folder)
    return [probe for probe in result.probes if result.metadata_of(probe)["resumed"]]

def invoke(args: list[str], cache: Path):
    """The CLI with ``cache`` as its cache root; its exit code must be 0."""
    result = CliRunner().invoke(main, args, env={"DEER_CACHE_DIR": str(cache)})
    assert result.exit_code == 0, result.output
    assert "unexpected" not in result.output and "Traceback" not in result.output, result.output
    return result


def warnings_in(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Warning: ")]


def assert_each_named_once(output: str, damaged: list[Path]) -> None:
    """One warning per damaged file, starting with its path and saying it was set aside."""
    for path in damaged:
        named = [line for line in warnings_in(output) if line.startswith(f"Warning: {path}: ")]
        assert len(named) == 1 and "set aside as" in named[0], (path, output)


RANK_COLUMNS = ["deer_rank_raw", "deer_rank_filtered", "deer_top10"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory, tiny_clm_dir):
    """`deer probe` once on the tiny KG: (args without --out, the filled cache, its ranks)."""
    root = tmp_path_factory.mktemp("probed")
    args = ["probe", "--kg", str(write_tiny_kg(root / "kg")), "--model", str(tiny_clm_dir), "--k-shot", "2", "--token-budget", "256"]
    first = invoke([*args, "--out", str(root / "first")], root / "cache")
    assert not warnings_in(first.output)
    return args, root / "cache", pd.read_parquet(root / "first" / "ranks.parquet")[RANK_COLUMNS]


@pytest.mark.parametrize("how", VECTOR_FAULTS)
def test_damaged_stored_vectors_are_set_aside_and_encoded_again(tmp_path, probed, how):
    args, filled, ranks = probed
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    damaged = corrupt_stored_vectors(cache, how)

    second = invoke([*args, "--out", str(tmp_path / "second")], cache)
    assert_each_named_once(second.output, damaged)
    assert len(set_aside_vector_files(cache)) == len(damaged)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "second" / "ranks.parquet")[RANK_COLUMNS], ranks)
    # every stored vector was damaged: all encoded again, and counted so (also where the damage is met only when ranking)
    metadata = json.loads((tmp_path / "second" / "metadata.json").read_text())["deer"]
    assert metadata["cache"]["entities_from_cache"] == metadata["cache"]["queries_from_cache"] == 0, metadata["cache"]
    assert metadata["work"]["prompts"] == metadata["cache"]["entities_encoded_now"] + metadata["cache"]["queries_encoded_now"]

    third = invoke([*args, "--out", str(tmp_path / "third")], cache)
    assert not warnings_in(third.output), third.output
    assert "encoded 0 entities + 0 queries" in third.output  # everything read back from the healed store
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "third" / "ranks.parquet")[RANK_COLUMNS], ranks)


@pytest.mark.parametrize("how", ["narrow", "nan", "truncate", "pickle"])
def test_damaged_bear_score_rows_are_set_aside_and_scored_again(tmp_path, tiny_clm_dir, how):
    cache = tmp_path / "cache"
    args = ["probe", "--probe", "bear", "--kg", str(write_tiny_kg(tmp_path / "kg")), "--model", str(tiny_clm_dir), "--k-shot", "2"]
    invoke([*args, "--out", str(tmp_path / "first")], cache)
    ranks = pd.read_parquet(tmp_path / "first" / "ranks.parquet")
    damaged = corrupt_stored_vectors(cache, how)

    second = invoke([*args, "--out", str(tmp_path / "second")], cache)
    assert_each_named_once(second.output, damaged)
    assert len(set_aside_vector_files(cache)) == len(damaged)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "second" / "ranks.parquet"), ranks)

    third = invoke([*args, "--out", str(tmp_path / "third")], cache)
    assert not warnings_in(third.output), third.output
    assert json.loads((tmp_path / "third" / "metadata.json").read_text())["bear"]["cache"]["queries_scored_now"] == 0


def test_minus_inf_is_a_log_likelihood_but_damage_in_a_vector(tmp_path):
    """A score row may hold -inf (an impossible statement's log-likelihood): kept; a vector never does:
    set aside when read, its item missing again."""
    for kind, minus_inf in (("bear", True), ("prompts", False)):
        store = EmbeddingStore(tmp_path, kind, {"model": "m"}, width=3, minus_inf=minus_inf)
        store.add(["a", "b"], np.ones((2, 3), dtype=np.float32))
        (part,) = corrupt_stored_vectors(store.folder, "minus-inf")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reopened = EmbeddingStore(tmp_path, kind, {"model": "m"}, width=3, minus_inf=minus_inf)
            try:
                value = reopened.get(["a"])[0, 0]
            except StoreDamaged:
                value = None
        messages = [str(w.message) for w in caught if w.category is DeerWarning]
        if minus_inf:
            assert not messages and value == -np.inf and not set_aside_vector_files(store.folder)
        else:
            assert value is None and reopened.missing(["a", "b"]) == [0, 1]
            assert len(messages) == 1 and messages[0].startswith(f"{part}: ") and "NaN or infinity; set aside" in messages[0]


def test_a_store_never_writes_what_it_would_set_aside(tmp_path):
    """A NaN row (a model's overflow) is used in this run but not stored, so the next run is not
    warned about a part this one wrote: it computes that row again."""
    store = EmbeddingStore(tmp_path, "prompts", {"model": "m"}, width=2)
    with pytest.warns(DeerWarning, match="1 of 2 results hold NaN or infinity: not stored"):
        store.add(["a", "b"], np.array([[1, 2], [np.nan, 0]], dtype=np.float32))
    assert store.missing(["a", "b"]) == []
    reopened = EmbeddingStore(tmp_path, "prompts", {"model": "m"}, width=2)
    assert reopened.missing(["a", "b"]) == [1] and not set_aside_vector_files(tmp_path)


@pytest.fixture(scope="module")
def lama_folder(tmp_path_factory) -> Path:
    return write_lama(tmp_path_factory.mktemp("lama") / "lama")


@dataclasses.dataclass(frozen=True)
class ResumeRun:
    """A command that keeps resume parts in its --out: where its result lands, how many parts it keeps, and which of
    them a run read back (its metadata.json)."""

    name: str
    result: str  # the result's folder under --out
    table: str  # its rows, under that folder
    parts: int
    resumed: Callable[[Path], list]

    def args(self, tmp_path: Path, model: Path, lama: Path, out: Path) -> list[str]:
        if self.name == "cloze":
            return ["cloze", "--dataset", str(lama), "--model", str(model), "--candidates", "relation", "--probes", "deer,lama",
                    "--bootstrap", "0", "--out", str(out)]
        return ["bear-dataset", "--dataset", str(write_dataset(tmp_path / "BEARmini")), "--model", str(model), "--out", str(out)]

    def outcome(self, out: Path) -> tuple[pd.DataFrame, dict]:
        """The run's rows and metrics.json."""
        folder = out / self.result
        return pd.read_parquet(folder / self.table), json.loads((folder / "metrics.json").read_text())


RESUME_RUNS = (
    ResumeRun("cloze", "cloze", "queries.parquet", 2, resumed_probes),  # a part per probe
    ResumeRun("bear-dataset", ".", "instances.parquet", 2,  # a part per relation
              lambda folder: json.loads((folder / "metadata.json").read_text())["bear"]["relations_resumed"]),
)


@pytest.mark.parametrize("how", TABLE_FAULTS)
@pytest.mark.parametrize("run", RESUME_RUNS, ids=lambda run: run.name)
def test_damaged_resume_parts_are_set_aside_and_made_again(tmp_path, lama_folder, tiny_clm_dir, run, how):
    """Every kind of resume part, damaged every way ``TABLE_FAULTS`` knows (a value edited in a still valid table too):
    named, set aside and made again, with the clean run's rows and metrics; the run after reads every part back."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = run.args(tmp_path, tiny_clm_dir, lama_folder, out)
    invoke(args, cache)
    table, metrics = run.outcome(out)
    assert run.resumed(out / run.result) == []  # the first run made every part
    damaged = corrupt_resume_parts(out, how)
    assert len(damaged) == run.parts

    second = invoke(args, cache)
    assert_each_named_once(second.output, damaged)
    assert len(set_aside_resume_parts(out)) == len(damaged)
    assert run.resumed(out / run.result) == []
    pd.testing.assert_frame_equal(run.outcome(out)[0], table)
    assert run.outcome(out)[1] == metrics

    third = invoke(args, cache)
    assert not warnings_in(third.output), third.output
    assert len(run.resumed(out / run.result)) == run.parts == len(resume_parts(out))
    pd.testing.assert_frame_equal(run.outcome(out)[0], table)
    assert run.outcome(out)[1] == metrics


# Every kind of value a part may hold: a table written with its digest reads back as written (the digest computed from
# what a reader gets), and the same table with one value changed, still valid, does not.
DIGEST_COLUMNS = {
    "int": [1, 2, 3], "float": [0.5, np.nan, -np.inf], "bool": [True, False, True], "text": ["a", None, "é"],
    "list": [[1.5, 2.0], [], [np.nan]],
}


@pytest.mark.parametrize("column", DIGEST_COLUMNS)
def test_a_table_written_with_its_digest_reads_back_and_an_edited_value_is_refused(tmp_path, column):
    path = write_table(tmp_path / "part.parquet", pd.DataFrame({"rank": [1.0, 2.0, 3.0], column: DIGEST_COLUMNS[column]}),
                       digest=True)
    read = read_stored_table(path, ["rank", column], 3, digest=True)
    edited = read.assign(rank=read["rank"] + 5)
    edited.to_parquet(path, index=False)  # as a user or another tool rewrites it: valid, and no digest
    with pytest.raises(StoredFileError, match=f"^{path}: records no digest of its content"):
        read_stored_table(path, digest=True)
    write_table(path, read, digest=True)
    edited = pq.read_table(path)  # the digest kept, a value changed
    edited = edited.set_column(0, "rank", pa.array([1.0, 2.0, 8.0])).replace_schema_metadata(edited.schema.metadata)
    pq.write_table(edited, path)
    with pytest.raises(StoredFileError, match=f"^{path}: its content is not what was written"):
        read_stored_table(path, digest=True)


def test_a_digest_is_asked_of_parquet_only(tmp_path):
    with pytest.raises(ValueError, match="part.csv: only a parquet table records its content digest"):
        write_table(tmp_path / "part.csv", pd.DataFrame({"rank": [1]}), digest=True)


# -- run folders given as input: a bad file is refused by name ---------------------------------------


def damage_run_file(path: Path, how: str) -> None:
    """A run folder's file damaged: its bytes (``damage_bytes``), a JSON list, a probe entry that is no
    object, a ranks table without its filtered ranks, or a table without its last row."""
    if how == "list":
        path.write_text("[]")
    elif how == "probe-entry":
        path.write_text(json.dumps({"deer": 3}))
    elif how == "columns":
        pd.read_parquet(path).drop(columns=["deer_rank_filtered"]).to_parquet(path, index=False)
    elif how == "rows":
        pd.read_parquet(path).iloc[:-1].to_parquet(path, index=False)
    else:
        damage_bytes(path, how)


@pytest.fixture()
def probe_run(tmp_path, probed) -> Path:
    args, filled, _ = probed
    invoke([*args, "--out", str(tmp_path / "run")], filled)
    return tmp_path / "run"


@pytest.mark.parametrize(("name", "how"), [("ranks.parquet", "truncate"), ("ranks.parquet", "not-a-table"),
                                           ("ranks.parquet", "columns"), ("metadata.json", "not-a-table"),
                                           ("metadata.json", "probe-entry"), ("metrics.json", "empty"),
                                           ("run_spec.json", "list")])
def test_a_bad_file_in_a_run_folder_is_refused_by_name(probe_run, name, how):
    damage_run_file(probe_run / name, how)
    with pytest.raises(ValueError, match=f"^{probe_run / name}: "):
        deer.load_result(probe_run)


def test_a_run_folder_without_its_run_spec_is_refused_as_0_1s(probe_run):
    """0.1 kept a KG run's spec in each probe's metadata entry, no run_spec.json; such a folder was read until 0.3.
    It is refused by name now, saying who wrote it and to make the run again (every probe's entry still records it here)."""
    (probe_run / "run_spec.json").unlink()
    assert all("run_spec" in entry for entry in json.loads((probe_run / "metadata.json").read_text()).values())
    with pytest.raises(ValueError, match=f"^{probe_run / 'run_spec.json'}: missing, though {probe_run} holds ranks.parquet: "
                                         "a folder written by deer-probe-toolkit 0.1 .or edited.*make the run again"):
        deer.load_result(probe_run)


@pytest.mark.parametrize(("name", "how"), [("ranks.parquet", "flip"), ("ranks.parquet", "columns"),
                                           ("metadata.json", "truncate"), ("metrics.json", "list")])
def test_an_experiment_refuses_a_bad_run_folder_file_by_name(tmp_path, probe_run, name, how):
    damage_run_file(probe_run / name, how)
    result = CliRunner().invoke(main, ["experiment", "agreement", "--run", str(probe_run), "--bootstrap", "0",
                                       "--out", str(tmp_path / "agreement")])
    assert result.exit_code == 1 and f"Error: {probe_run / name}: " in result.output, result.output
    assert "unexpected" not in result.output


@pytest.fixture(scope="module")
def bear_run(tmp_path_factory, tiny_clm_dir) -> tuple[Path, Path]:
    """A finished `deer bear-dataset` run: (its data set, its folder)."""
    root = tmp_path_factory.mktemp("bear-run")
    folder = write_dataset(root / "BEARmini")
    invoke(["bear-dataset", "--dataset", str(folder), "--model", str(tiny_clm_dir), "--out", str(root / "run")], root / "cache")
    return folder, root / "run"


@pytest.mark.parametrize("how", ["truncate", "rows", "empty"])
def test_cloze_refuses_a_bad_bear_run_table_by_name(tmp_path, bear_run, tiny_clm_dir, how):
    dataset, finished = bear_run
    run = shutil.copytree(finished, tmp_path / "bear-run")
    damage_run_file(run / "instances.parquet", how)
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(dataset), "--model", str(tiny_clm_dir), "--probes", "deer",
                                       "--bootstrap", "0", "--bear-run", str(run), "--out", str(tmp_path / "out")],
                                env={"DEER_CACHE_DIR": str(tmp_path / "cache")})
    assert result.exit_code == 1 and f"Error: {run / 'instances.parquet'}: " in result.output, result.output
    assert "unexpected" not in result.output


def test_a_bear_run_without_its_metric_convention_is_refused_as_0_1s_and_resummarised(tmp_path, bear_run):
    """0.1 stored no metric convention with a BEAR data-set score; its folders were read as strict ties (and a
    resummarised one recorded 'full-domain-support+strict-ties' as its previous convention) until 0.3.  Such a
    folder is refused by name now, saying how to recompute it; recomputed, it records no previous convention."""
    from bear_ref.dataset import resummarise_bear_dataset

    run = shutil.copytree(bear_run[1], tmp_path / "bear-run")
    metrics, metadata = (json.loads((run / name).read_text()) for name in ("metrics.json", "metadata.json"))
    del metrics["bear"]["convention"], metadata["bear"]["metric_convention"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=f"^{run / 'metrics.json'}: records no metric convention .bear.convention.ties., as "
                                         "deer-probe-toolkit 0.1 wrote it.*`deer bear-dataset --resummarise --dataset DATASET "
                                         f"--out {run}`"):
        deer.load_result(run)
    made = resummarise_bear_dataset(run)  # the data set its metadata names
    assert made.metadata["resummarised"]["previous_metric_convention"] is None
    assert deer.load_result(run).metrics.to_dict() == made.metrics.to_dict()


def test_a_bear_dataset_folder_whose_metrics_disagree_with_its_instances_table_is_refused(tiny_clm_dir, tmp_path):
    """load_result returned a BEAR data-set folder's metrics.json unchecked against its instances table (KG and cloze
    folders are checked): a table cut to one relation read back with both relations' metrics; an edited score too."""

    import pandas as pd

    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from deer.platform.read_back import StoredFileError
    from deer.platform.result import load_result
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    out = tmp_path / "run"
    made = run_bear_dataset(data, open_model(str(tiny_clm_dir)), out, {"relations": None}, backend="plain", show_progress=False)
    read = load_result(out)  # as written: read back, its metrics those of its table
    assert read.metrics["overall"] == json.loads(json.dumps(made.metrics["overall"])) and len(read.table) == len(made.table)
    metrics = json.loads((out / "metrics.json").read_text())
    edited = json.loads(json.dumps(metrics))
    edited["bear"]["per_relation"]["P37"]["accuracy_mean"] += 0.25
    (out / "metrics.json").write_text(json.dumps(edited))
    with pytest.raises(StoredFileError, match=r"metrics\.json.*relation P37 accuracy_mean disagrees with instances\.parquet"):
        load_result(out)
    (out / "metrics.json").write_text(json.dumps(metrics))
    table = pd.read_parquet(out / "instances.parquet")
    table[table["relation"] == "P36"].to_parquet(out / "instances.parquet")  # the table rewritten: one relation's rows
    with pytest.raises(StoredFileError, match=r"metrics\.json.*per-relation blocks \(P36, P37\) are not the relations of"):
        load_result(out)
