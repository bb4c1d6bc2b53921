"""experiments/compute_time.py (`deer experiment compute-time`): what it times, what it leaves out and says so, and
where its fit is not to be trusted."""

from __future__ import annotations

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
