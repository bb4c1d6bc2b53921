"""experiments/plots.py: the figures drawn from the experiments' numbers."""

from __future__ import annotations

import pytest


def test_a_scatter_panel_without_finite_pairs_is_titled_n_0():
    """A panel with no finite (x, y) pair was titled n=1."""
    pytest.importorskip("matplotlib")
    from experiments.plots import log_rank_scatter

    nan = float("nan")
    figure = log_rank_scatter([{"row": "m", "column": "deer vs lama", "x": [nan, 2.0], "y": [1.0, nan],
                                "x_label": "DEER", "y_label": "LAMA", "r": nan}])
    assert "n=0" in figure.axes[0].get_title()


def test_size_trend_draws_a_bootstrap_interval_that_excludes_r():
    """A bootstrap interval not around r (ci_low above r) gave a negative error bar: the figure raised."""
    pytest.importorskip("matplotlib")
    from experiments.plots import size_trend

    points = [{"pair": "deer vs lama", "parameters": 1e8, "r": 0.50, "ci_low": 0.55, "ci_high": 0.70},
              {"pair": "deer vs lama", "parameters": 1e9, "r": 0.60, "ci_low": 0.40, "ci_high": 0.58}]
    axis = size_trend(points, []).axes[0]
    drawn = [segment[:, 1].tolist() for collection in axis.collections for segment in collection.get_segments()]
    assert sorted(drawn) == [[0.4, 0.58], [0.55, 0.7]]  # each interval as it is, not moved to r
