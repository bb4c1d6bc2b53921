"""The experiments' numbers on hand-made runs (no model): what is compared, read back and reported.

Each run is a ``RunResult`` built from given ranks, as ``experiments.runs.load_run`` reads one from its folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deer.platform.result import RunResult
from deer.platform.run_spec import RunSpec
from experiments.runs import TOOLKIT
from experiments.screen import run_screen


def make_run(label: str, ranks: dict[str, list[float]], queries: str = "q", metadata: dict | None = None,
             folder: Path | None = None) -> RunResult:
    """A KG run of ``label`` whose probes have these gold ranks (raw = filtered), on the query set ``queries``."""
    n = len(next(iter(ranks.values())))
    table = pd.DataFrame({"query": np.arange(n), "head_id": [f"h{i}" for i in range(n)], "relation_id": ["r"] * n,
                          "tail_id": [f"t{i}" for i in range(n)], "relation": ["r"] * n, "tail_tokens": np.ones(n, int)})
    for probe, values in ranks.items():
        table[f"{probe}_rank_raw"] = table[f"{probe}_rank_filtered"] = np.asarray(values, dtype=np.float64)
    spec = RunSpec(f"weights-{label}", "tok", "float32", "kg", "test", None, None, queries, {}, {})
    run = RunResult(table, {p: {} for p in ranks}, metadata or {p: {} for p in ranks}, spec=spec)
    run.label, run.folder = label, folder or Path(f"runs/{label}")
    return run


def test_screen_refuses_runs_that_ranked_different_queries(tmp_path):
    """A leaderboard set models probed on different queries (another subset, split or KG) side by side."""
    same = [make_run("a", {"deer": [1, 2, 3, 4]}), make_run("b", {"deer": [1, 1, 1, 1]})]
    assert len(run_screen(same, tmp_path / "same")["leaderboard"]) == 2
    other = [make_run("a", {"deer": [1, 2, 3, 4]}, queries="q"), make_run("b", {"deer": [1, 1, 1]}, queries="q-other")]
    with pytest.raises(ValueError, match=r"runs/a and runs/b ranked different queries"):
        run_screen(other, tmp_path / "other")


def test_agreement_over_run_folders_compares_only_the_probes_asked_for(tmp_path):
    """--probes was dropped with --run: every pair of the folder's probes was compared and reported."""
    from click.testing import CliRunner

    from experiments.cli import main

    make_run("m", {"deer": [1, 2, 3, 4, 5], "bear": [2, 1, 4, 3, 5], "lama": [5, 4, 3, 2, 1]}).save(tmp_path / "run")
    result = CliRunner().invoke(main, ["experiment", "agreement", "--run", str(tmp_path / "run"), "--probes", "deer,bear",
                                       "--bootstrap", "0", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    numbers = json.loads((tmp_path / "out" / "agreement.json").read_text())
    assert [row["pair"] for row in numbers["pairs"]] == ["deer vs bear"]
    assert [row["probe"] for row in numbers["hits"]] == ["deer", "bear"]
    # Without --probes, every probe of the folder is compared (a third probe's too), as before.
    make_run("m", {"deer": [1, 2, 3], "shortest": [3, 2, 1]}).save(tmp_path / "third")
    result = CliRunner().invoke(main, ["experiment", "agreement", "--run", str(tmp_path / "third"), "--bootstrap", "0",
                                       "--out", str(tmp_path / "out3")])
    assert result.exit_code == 0, result.output
    assert [row["pair"] for row in json.loads((tmp_path / "out3" / "agreement.json").read_text())["pairs"]] == ["deer vs shortest"]


def test_screen_counts_nothing_as_encoded_now_for_a_run_it_did_not_probe(tmp_path):
    """A --run folder (read back, experiment {}) showed the encodings of the run that made it as encoded now."""
    cache = {"entities_encoded_now": 24, "queries_encoded_now": 30, "entities_from_cache": 0, "queries_from_cache": 0}
    read_back = make_run("a", {"deer": [1, 2, 3]}, metadata={"deer": {"cache": cache}})
    probed_now = make_run("b", {"deer": [1, 2, 3]}, metadata={"deer": {"cache": cache}})
    probed_now.experiment = {"probe_seconds": {"deer": 1.5}, "reused": []}
    board = {row["model"]: row for row in run_screen([read_back, probed_now], tmp_path)["leaderboard"]}
    assert (board["a"]["encoded_now"], board["a"]["from_cache"]) == (0, 54)
    assert (board["b"]["encoded_now"], board["b"]["from_cache"]) == (54, 0)


def test_an_experiment_run_again_into_its_folder_leaves_no_table_of_the_earlier_run(tmp_path):
    """A second screen into the same --out (no reference, no steps) left the first one's curves.csv,
    leaderboard_bear.csv and ordering_agreement.csv beside its own leaderboard, as if made now."""
    first = [make_run("a", {"deer": [1, 2, 3], "bear": [1, 3, 2]}), make_run("b", {"deer": [2, 2, 9], "bear": [1, 1, 1]})]
    run_screen(first, tmp_path, reference="bear", steps={"a": 1, "b": 2})
    assert (tmp_path / "curves.csv").exists() and (tmp_path / "leaderboard_bear.csv").exists()
    (tmp_path / "notes.txt").write_text("the user's own file")
    numbers = run_screen([make_run("a", {"deer": [5, 5, 5]}), make_run("b", {"deer": [1, 1, 1]})], tmp_path)
    written = json.loads((tmp_path / "screen.json").read_text())["files"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*written, "screen.json", "notes.txt"])
    assert numbers["out_dir"] == str(tmp_path)


def test_a_screen_refused_for_a_missing_reference_writes_nothing(tmp_path):
    """A run without the reference probe was refused only after leaderboard.csv/.md/.png were written: a folder of an
    earlier screen then held the new runs' leaderboard beside the old runs' ordering agreement and screen.json."""
    run_screen([make_run("a", {"deer": [1, 2, 3], "bear": [1, 3, 2]}), make_run("b", {"deer": [2, 2, 9], "bear": [1, 1, 1]})],
               tmp_path, reference="bear")
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(ValueError, match="no bear ranks for: b"):
        run_screen([make_run("a", {"deer": [5, 5, 5], "bear": [1, 1, 1]}), make_run("b", {"deer": [1, 1, 1]})], tmp_path,
                   reference="bear")
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_a_model_folder_given_as_dot_is_labelled_by_its_name(tmp_path, monkeypatch):
    """`--model .` labelled its run '' in every table of an experiment, and '.' when its folder was read back (--run)."""
    from experiments.runs import model_label, run_label

    (tmp_path / "opt-x").mkdir()
    monkeypatch.chdir(tmp_path / "opt-x")
    names = [".", "../opt-x", "facebook/opt-125m"]
    assert [model_label(name) for name in names] == ["opt-x", "opt-x", "facebook/opt-125m"]
    assert [run_label({"deer": {"model": {"name": name}}}, tmp_path / "run") for name in names] == [model_label(n) for n in names]


def test_size_trend_says_which_ranks_its_agreement_correlated(tmp_path):
    """size_trend.csv/.md/.json dropped the agreement's rank type: raw-rank r read as the paper's filtered one."""
    from experiments.agreement import run_agreement
    from experiments.size_trend import write_size_trend

    metadata = {probe: {"model": {"name": "m", "parameters": 1000}} for probe in ("deer", "lama")}
    run = make_run("m", {"deer": [9, 8, 30, 4, 5], "lama": [5, 40, 3, 2, 1]}, metadata=metadata, folder=tmp_path / "run")
    run.save(tmp_path / "run")
    run_agreement([run], tmp_path / "agreement", rank_type="raw", bootstrap=0)
    table = write_size_trend(tmp_path / "agreement" / "agreement.json", tmp_path / "trend")
    assert table["rank_type"].tolist() == ["raw"]
    assert json.loads((tmp_path / "trend" / "size_trend.json").read_text())["points"][0]["rank_type"] == "raw"
    assert "| raw |" in (tmp_path / "trend" / "size_trend.md").read_text()


@pytest.mark.parametrize("command", ["token-bias", "agreement"])
def test_a_probe_asked_for_that_a_run_folder_lacks_is_refused(command, tmp_path):
    """token-bias --run DIR --probes deer,bear on a folder without BEAR reported DEER alone, exit 0."""
    from click.testing import CliRunner

    from experiments.cli import main

    make_run("m", {"deer": [1, 2, 3, 4, 5], "lama": [5, 4, 3, 2, 1]}).save(tmp_path / "run")
    result = CliRunner().invoke(main, ["experiment", command, "--run", str(tmp_path / "run"), "--probes", "deer,bear",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and f"{tmp_path / 'run'} has no bear ranks" in result.output
    assert not (tmp_path / "out").exists()


def test_screen_refuses_runs_made_with_other_templates_or_probe_options(tmp_path):
    """--run folders of k_shot 8 and 0 (or of other reference options) went on one leaderboard labelled by model only."""
    import dataclasses

    eight, zero = make_run("a", {"deer": [1, 2, 3], "bear": [1, 2, 3]}), make_run("b", {"deer": [9, 9, 9], "bear": [1, 2, 3]})
    eight.spec, zero.spec = (dataclasses.replace(run.spec, templates={"k_shot": k}) for run, k in ((eight, 8), (zero, 0)))
    with pytest.raises(ValueError, match=r"runs/a and runs/b were made with other settings \(templates.k_shot: 8 and 0\)"):
        run_screen([eight, zero], tmp_path / "templates")
    options = [make_run(label, {"deer": [1, 2, 3], "bear": [1, 2, 3]},
                        metadata={"deer": {"options": {}}, "bear": {"options": {"pll_variant": variant}}})
               for label, variant in (("a", "original"), ("b", "within_word_l2r"))]
    with pytest.raises(ValueError, match=r"bear pll_variant: 'original' and 'within_word_l2r'"):
        run_screen(options, tmp_path / "options", reference="bear")
    assert len(run_screen(options, tmp_path / "deer-only")["leaderboard"]) == 2  # BEAR's options: no part of a DEER board


def test_screen_refuses_runs_whose_reference_ran_on_another_backend(tmp_path):
    """s12-b: --run folders whose BEAR ranks were made on two backends (a caching backend's scores may differ: its
    store_key) went on one leaderboard, their orderings correlated, exit 0."""
    runs = [make_run(label, {"deer": [1, 2, 3], "bear": [1, 2, 3]},
                     metadata={"deer": {"options": {}, "backend": "hf"}, "bear": {"options": {}, "backend": backend}})
            for label, backend in (("a", "hf"), ("b", "shifted"))]
    with pytest.raises(ValueError, match=r"bear backend: 'hf' and 'shifted'"):
        run_screen(runs, tmp_path / "backends", reference="bear")
    assert len(run_screen(runs, tmp_path / "deer-only")["leaderboard"]) == 2  # BEAR's backend: no part of a DEER board


def test_screen_refuses_runs_made_by_another_version_of_the_toolkit(tmp_path):
    """`experiment screen --run A --run B` put ranks made by two versions of the toolkit (which may score otherwise:
    LAMA's scoring changed between them) on one leaderboard, exit 0."""
    runs = [make_run(label, {"deer": [1, 2, 3]}, metadata={"deer": {"options": {}, "versions": {TOOLKIT: version}}})
            for label, version in (("a", "0.1.0"), ("b", "0.2.0.dev0"))]
    with pytest.raises(ValueError, match=r"deer toolkit: '0.1.0' and '0.2.0.dev0'"):
        run_screen(runs, tmp_path / "versions")
    same = [make_run(label, {"deer": [1, 2, 3]}, metadata={"deer": {"options": {}, "versions": {TOOLKIT: "0.2.0.dev0"}}})
            for label in ("a", "b")]
    assert len(run_screen(same, tmp_path / "same")["leaderboard"]) == 2


def test_cloze_refuses_a_stored_bear_run_of_another_toolkit_version(tiny_clm_dir, tmp_path):
    """--bear-run took a `deer bear-dataset` table scored by another version of the toolkit (whose BEAR may score
    otherwise) as this comparison's BEAR numbers; run_probes makes such ranks again, --bear-run now refuses them."""
    import bear_ref
    from deer.backends import open_backend
    from deer.backends.models import open_model
    from deer.base.files import package_versions, write_json
    from deer.platform.read_back import read_json_object
    from experiments.cloze_bear import bear_scoring, stored_bear_table
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    data, loaded = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini"))), open_model(str(tiny_clm_dir))
    made = bear_ref.bear_dataset(data, loaded, out=tmp_path / "bear", show_progress=False)
    scoring = bear_scoring(open_backend("hf", loaded))
    assert stored_bear_table(tmp_path / "bear", data, loaded, scoring)["rank"].tolist() == made.table["rank"].tolist()
    metadata = read_json_object(tmp_path / "bear" / "metadata.json")
    metadata["bear"]["versions"][TOOLKIT] = "0.0.1"  # no version this test runs on
    write_json(tmp_path / "bear" / "metadata.json", metadata)
    with pytest.raises(ValueError, match=rf"toolkit '0.0.1', this command's BEAR '{package_versions()[TOOLKIT]}'"):
        stored_bear_table(tmp_path / "bear", data, loaded, scoring)


def test_cloze_takes_a_stored_bear_run_only_if_scored_as_its_own_bear(tiny_clm_dir, tmp_path, monkeypatch):
    """--bear-run took a `deer bear-dataset` table scored on another backend (another store_key) or PLL variant
    as BEAR's numbers of this comparison, unchecked."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    import bear_ref
    from deer import backends
    from deer.backends.models import LoadedModel, open_model
    from experiments.benchmarks import probe_benchmark
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))  # forgotten after the test
    backends.register_backend("shifted", "tests.test_audit_a_fixes:ShiftedBackend")  # scores that are not the model's own
    folder = write_dataset(tmp_path / "BEARmini")
    bear_ref.bear_dataset(str(folder), open_model(str(tiny_clm_dir)), out=tmp_path / "shifted", backend="shifted",
                          show_progress=False)
    with pytest.raises(ValueError, match=r"shifted is not a BEAR run of this model and scoring: backend 'shifted', this "
                                         r"command's BEAR 'hf'"):
        probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer"], bear_run=tmp_path / "shifted", bootstrap=0,
                        out=tmp_path / "out", show_progress=False)
    from experiments.cloze_bear import bear_scoring, stored_bear_table

    # A masked LM's stored PLL of the other variant is refused; of the variant this command's BEAR uses, taken.
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "is", "paris", "berlin", "rome", "."]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32)).eval()
    loaded, data = LoadedModel.from_objects(model, tokenizer, "tiny-bert"), load_bear_dataset(str(folder))
    scoring = bear_scoring(backends.open_backend("hf", loaded))
    for variant in ("original", "within_word_l2r"):
        bear_ref.bear_dataset(data, loaded, out=tmp_path / variant, pll_variant=variant, show_progress=False)
    with pytest.raises(ValueError, match=r"scoring 'pll-original', this command's BEAR 'pll-within_word_l2r'"):
        stored_bear_table(tmp_path / "original", data, loaded, scoring)
    assert len(stored_bear_table(tmp_path / "within_word_l2r", data, loaded, scoring)) == 3 * data.n_instances



def test_ordering_agreement_counts_only_the_models_it_correlated():
    """n_models (and its small-sample caveat) counted a model with a NaN score, which the correlation left out."""
    from experiments.stats import ordering_agreement

    ordering = ordering_agreement([0.9, float("nan"), 0.5, 0.1], [0.7, 0.9, 0.4, 0.2], ["a", "b", "c", "d"])
    assert ordering["n_models"] == 3 and ordering["spearman_rho"] == 1.0
    assert ordering["order_a"] == ["a", "c", "d", "b"]  # a NaN score orders last


def test_a_scatter_panel_without_finite_pairs_is_titled_n_0():
    """A panel with no finite (x, y) pair was titled n=1."""
    pytest.importorskip("matplotlib")
    from experiments.plots import log_rank_scatter

    nan = float("nan")
    figure = log_rank_scatter([{"row": "m", "column": "deer vs lama", "x": [nan, 2.0], "y": [1.0, nan],
                                "x_label": "DEER", "y_label": "LAMA", "r": nan}])
    assert "n=0" in figure.axes[0].get_title()


def test_screen_places_a_run_without_a_finite_metric_last(tmp_path):
    """A run whose DEER ranks are all NaN (hit@10 NaN) was placed first, place 1, on the leaderboard and its figure."""
    pytest.importorskip("matplotlib")
    from experiments.plots import leaderboard_bars

    nan = float("nan")
    runs = [make_run("none", {"deer": [nan, nan, nan]}), make_run("good", {"deer": [1, 2, 30]}),
            make_run("poor", {"deer": [40, 50, 60]})]
    board = run_screen(runs, tmp_path)["leaderboard"]
    assert [(row["model"], row["place"]) for row in board] == [("good", 1), ("poor", 2), ("none", 3)]
    bars = leaderboard_bars([row["model"] for row in board], [row["hit@10"] for row in board], [0.0] * 3, "hit@10")
    assert [label.get_text() for label in bars.axes[0].get_yticklabels()] == ["none", "poor", "good"]  # best on top


def test_compute_time_refuses_a_target_split_without_triples_before_any_timing(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """--target naming an empty split raised ZeroDivisionError after all the timing."""
    from click.testing import CliRunner

    from experiments import compute_time
    from experiments.cli import main

    def timed(*args, **kwargs):
        raise AssertionError("timing started before the target was checked")

    monkeypatch.setattr(compute_time, "time_deer", timed)
    monkeypatch.setattr(compute_time, "deer_probe", timed)
    (tiny_kg_dir / "valid.tsv").write_text("")
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--split", "train", "--target", "valid", "--query-sizes", "1,2", "--repeats", "1",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"--target valid: the valid split of {tiny_kg_dir} has no triples" in result.output


@pytest.mark.parametrize("cost", [-0.2, 0.2])
def test_compute_time_warns_where_the_fit_extrapolates_from_noise(cost, tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """On tiny query sizes the timing noise can make time fall as |Q| grows: the table showed BEAR's extrapolated total
    as -7.24 s (a speed-up of -1.34x) with no word.  A fit whose slope or total is not positive is now named."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    from experiments import compute_time, reference
    from experiments.cli import main

    clock = {"now": 0.0}

    def score(queries, loaded, templates, statements_per_query=None, seed=0):  # on a fake clock: 1 s + cost per query
        clock["now"] += 1.0 + cost * len(queries)
        return {"statements": len(queries)}

    monkeypatch.setattr(compute_time, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    monkeypatch.setattr(reference, "timing_scorer", lambda scorer: score)
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--split", "train", "--query-sizes", "1,2,3", "--repeats", "1", "--scorers", "plain",
                                       "--plain-statements", "2", "--deer-queries", "2", "--no-warmup",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    fit = json.loads((tmp_path / "out" / "compute_time.json").read_text())["scorers"]["plain"]["extrapolation"]
    assert (fit["prediction"] < 0) == (cost < 0)
    assert ("timing noise at these query sizes" in result.output) == (cost < 0)


def test_size_trend_draws_a_bootstrap_interval_that_excludes_r():
    """A bootstrap interval not around r (ci_low above r) gave a negative error bar: the figure raised."""
    pytest.importorskip("matplotlib")
    from experiments.plots import size_trend

    points = [{"pair": "deer vs lama", "parameters": 1e8, "r": 0.50, "ci_low": 0.55, "ci_high": 0.70},
              {"pair": "deer vs lama", "parameters": 1e9, "r": 0.60, "ci_low": 0.40, "ci_high": 0.58}]
    axis = size_trend(points, []).axes[0]
    drawn = [segment[:, 1].tolist() for collection in axis.collections for segment in collection.get_segments()]
    assert sorted(drawn) == [[0.4, 0.58], [0.55, 0.7]]  # each interval as it is, not moved to r


@pytest.mark.parametrize(("kg", "split", "fingerprint", "paper"), [
    ("wn18rr", "test", "e987fa4ff860fefa", True), ("my-own-kg", "test", "e987fa4ff860fefa", False),
    ("wn18rr", "valid", "e987fa4ff860fefa", False), ("wn18rr", "test", "another-kg", False)])
def test_agreement_sets_the_paper_number_only_beside_wn18rr_test_rows(kg, split, fingerprint, paper, tmp_path):
    """same_protocol_as_paper was True, and the paper's 0.50-0.80 shown, for a single-token DEER vs LAMA row on any KG or split."""
    import dataclasses

    from experiments.agreement import run_agreement

    metadata = {probe: {"kg": {"name": kg}, "split": split} for probe in ("deer", "lama")}
    metadata["lama"]["single_token"] = True
    run = make_run("m", {"deer": [1, 2, 3, 4, 5], "lama": [2, 1, 4, 3, 5]}, metadata=metadata)
    run.spec = dataclasses.replace(run.spec, kg_fingerprint=fingerprint, split=split)
    (row,) = run_agreement([run], tmp_path, bootstrap=0)["pairs"]
    assert row["same_protocol_as_paper"] is paper
    assert (row["paper_pearson_r_log"] == "0.50 (OPT-350M) .. 0.80 (OPT-6.7B)") is paper
    assert (row["paper_protocol"] is not None) is paper


def test_the_pinned_wn18rr_fingerprint_is_the_readers():
    """The fingerprint agreement pins is the one the WN18RR reader gives the files kg_data/manifest.json pins."""
    from experiments.agreement import WN18RR_FINGERPRINT
    from kg_data.errors import KGNotFoundError
    from kg_data.load import load_kg
    from kg_data.locate import find_dataset

    try:
        folder = find_dataset("wn18rr")
    except KGNotFoundError:
        pytest.skip("WN18RR is not on disk")
    assert load_kg(str(folder)).fingerprint() == WN18RR_FINGERPRINT
