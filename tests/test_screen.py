"""experiments/screen.py (`deer experiment screen`) on hand-made runs (no model, ``tests/hand_made_runs.py``): which
runs it sets side by side, what it writes and what it refuses."""

from __future__ import annotations

import json

import pytest

from experiments.runs import TOOLKIT
from experiments.screen import run_screen
from tests.hand_made_runs import make_run


def test_screen_refuses_runs_that_ranked_different_queries(tmp_path):
    """A leaderboard set models probed on different queries (another subset, split or KG) side by side."""
    same = [make_run("a", {"deer": [1, 2, 3, 4]}), make_run("b", {"deer": [1, 1, 1, 1]})]
    assert len(run_screen(same, tmp_path / "same")["leaderboard"]) == 2
    other = [make_run("a", {"deer": [1, 2, 3, 4]}, queries="q"), make_run("b", {"deer": [1, 1, 1]}, queries="q-other")]
    with pytest.raises(ValueError, match=r"runs/a and runs/b ranked different queries"):
        run_screen(other, tmp_path / "other")


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
