"""experiments/compute_time.py (`deer experiment compute-time`): what it times, what it leaves out and says so, and
where its fit is not to be trusted."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from experiments.cli import main


def test_compute_time_says_which_query_sizes_it_leaves_out(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """Sizes above the split's query count were dropped without a word (the fit on other sizes than asked)."""
    pytest.importorskip("deer.backends.plain")
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--split", "train", "--query-sizes", "1,3,500", "--repeats", "1", "--candidates", "2",
                                       "--plain-statements", "1", "--deer-queries", "2", "--scorers", "plain",
                                       "--out", str(tmp_path / "ct")])
    assert result.exit_code == 0, result.output
    assert "query sizes 500 left out: the train split has 9 queries" in result.output


def test_compute_time_says_which_counts_it_times_with_fewer(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """--candidates, --deer-candidates and --deer-queries above the KG's entities or the split's queries were cut to them
    without a word, while compute_time.json's settings record the values asked."""
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--query-sizes", "1,2", "--repeats", "1", "--no-warmup", "--scorers", "bear_ref",
                                       "--candidates", "50", "--deer-candidates", "100", "--deer-queries", "100",
                                       "--out", str(tmp_path / "ct")])
    assert result.exit_code == 0, result.output
    assert "candidates 50 (there are 12), deer_candidates 100 (there are 12), deer_queries 100 (there are 4)" in result.output


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
