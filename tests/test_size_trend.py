"""experiments/size_trend.py: the trend of agreement with model size, and which ranks it correlated."""

from __future__ import annotations

import json

from tests.hand_made_runs import make_run


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
