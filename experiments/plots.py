"""Figures of the experiments: matplotlib Figures built without pyplot, so the caller's backend is never
switched and nothing needs closing.  matplotlib (the ``plots`` extra) is imported when a figure is made;
without it that call raises :class:`deer.base.extras.MissingExtraError` naming the extra.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from deer.base.extras import import_extra
from experiments.stats import finite_pairs

PROBE_LABELS = {"deer": "DEER", "bear": "BEAR", "lama": "LAMA"}


def _matplotlib(module: str):
    return import_extra(f"matplotlib.{module}", "plots", "The experiments' figures")


def _subplots(nrows: int = 1, ncols: int = 1, **kwargs):
    """(Figure, axes) as ``pyplot.subplots`` gives them, without pyplot's global state."""
    figure = _matplotlib("figure").Figure(figsize=kwargs.pop("figsize", None))
    return figure, figure.subplots(nrows, ncols, **kwargs)


def _finish(figure, title: str = ""):
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def probe_label(probe: str) -> str:
    return PROBE_LABELS.get(probe, probe)


def _plain_log_ticks(*axes) -> None:
    """Rank ticks as plain numbers (1, 10, 100) rather than 10^k or 2x10^1."""
    ticker = _matplotlib("ticker")
    for axis in axes:
        axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(ticker.NullFormatter())


def rank_by_token_length(token_lengths: np.ndarray, ranks_by_probe: dict[str, np.ndarray], title: str = ""):
    """Box plot of the gold tail's (log) rank per tail token length, one panel per probe (paper Fig. 4)."""
    probes = list(ranks_by_probe)
    figure, axes = _subplots(1, len(probes), figsize=(4.2 * len(probes), 3.6), squeeze=False, sharey=True)
    lengths = np.asarray(token_lengths)
    for axis, probe in zip(axes[0], probes, strict=True):
        ranks = np.asarray(ranks_by_probe[probe], dtype=np.float64)
        keep = np.isfinite(ranks)
        levels = sorted(set(lengths[keep].tolist()))
        groups = [ranks[keep & (lengths == level)] for level in levels]
        if groups:
            axis.boxplot(groups, tick_labels=[f"{level}\nn={len(group)}" for level, group in zip(levels, groups, strict=True)],
                         showfliers=True)
        axis.set(yscale="log", title=probe_label(probe), xlabel="gold tail length (tokens)")
        _plain_log_ticks(axis.yaxis)
    axes[0][0].set_ylabel("rank of gold tail (log)")
    return _finish(figure, title)


def log_rank_scatter(panels: Sequence[dict], hit_k: int = 10):
    """Scatter plots of log rank vs log rank, each Hit@k quadrant annotated with its share of queries; ``panels``:
    dicts with row (e.g. model), column (e.g. "deer vs lama"), x, y (rank arrays), x_label, y_label, r (log-rank r)."""
    rows = list(dict.fromkeys(p["row"] for p in panels))
    columns = list(dict.fromkeys(p["column"] for p in panels))
    figure, axes = _subplots(len(rows), len(columns), figsize=(3.8 * len(columns), 3.6 * len(rows)), squeeze=False)
    for axis in axes.flat:
        axis.set_visible(False)
    for panel in panels:
        axis = axes[rows.index(panel["row"])][columns.index(panel["column"])]
        axis.set_visible(True)
        x, y = finite_pairs(panel["x"], panel["y"])
        axis.scatter(x, y, s=6, alpha=0.4, edgecolors="none")
        axis.set(xscale="log", yscale="log", xlabel=f"{panel['x_label']} rank (log)", ylabel=f"{panel['y_label']} rank (log)")
        _plain_log_ticks(axis.xaxis, axis.yaxis)
        axis.axvline(hit_k + 0.5, color="grey", lw=0.8, ls="--")
        axis.axhline(hit_k + 0.5, color="grey", lw=0.8, ls="--")
        for x_hit, y_hit in itertools.product((True, False), repeat=2):
            share = np.mean(((x <= hit_k) == x_hit) & ((y <= hit_k) == y_hit)) if len(x) else 0.0
            axis.text(0.04 if x_hit else 0.96, 0.96 if not y_hit else 0.04, f"{share:.0%}", transform=axis.transAxes,
                      ha="left" if x_hit else "right", va="top" if not y_hit else "bottom", fontsize=8, color="dimgrey")
        r = panel.get("r")
        r_text = f"r = {r:.2f}" if r is not None and np.isfinite(r) else "r = n/a"
        axis.set_title(f"{panel['row']}: {panel['column']}\n{r_text} (log ranks, n={len(x)}); dashed: Hit@{hit_k}", fontsize=9)
    return _finish(figure)


def compute_time_fits(curves: Sequence[dict]):
    """Measured seconds per query-subset size with the fitted line, one panel per scorer."""
    figure, axes = _subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False)
    for axis, curve in zip(axes[0], curves, strict=True):
        sizes = np.asarray(curve["sizes"], dtype=np.float64)
        for repeat, times in enumerate(curve["times_by_repeat"]):
            axis.plot(sizes, times, "o", ms=4, alpha=0.7, label=f"run {repeat + 1}")
        grid = np.linspace(0, sizes.max(), 50)
        axis.plot(grid, curve["intercept"] + curve["slope"] * grid, "-", color="black", lw=1, label="linear fit")
        axis.set(xlabel="|Q| (queries)", ylabel="seconds", title=curve["scorer"])
        axis.legend(fontsize=7)
    return _finish(figure)


def leaderboard_bars(labels: Sequence[str], values: Sequence[float], errors: Sequence[float], metric: str):
    """Horizontal bars of one metric per model, best on top (a NaN at the bottom), with standard-error whiskers."""
    order = np.argsort(np.nan_to_num(np.asarray(values, dtype=np.float64), nan=-np.inf), kind="stable")
    figure, axis = _subplots(figsize=(6, 0.4 * len(labels) + 1.2))
    axis.barh([labels[i] for i in order], [values[i] for i in order], xerr=[errors[i] for i in order], color="tab:blue")
    axis.set_xlabel(metric)
    return _finish(figure)


def metric_curves(steps: Sequence[int], series: dict[str, Sequence[float]], title: str = ""):
    """One panel per metric against the training step; ``series``: "metric" or "metric | line label" -> values."""
    metrics = list(dict.fromkeys(key.split(" | ")[0] for key in series))
    figure, axes = _subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.2), squeeze=False)
    for axis, metric in zip(axes[0], metrics, strict=True):
        for key, values in series.items():
            name, _, line = key.partition(" | ")
            if name == metric:
                axis.plot(steps, values, marker="o", label=line or None)
        axis.set(xlabel="training step", ylabel=metric)
        if axis.get_legend_handles_labels()[0]:  # a line with a label
            axis.legend(fontsize=8)
    return _finish(figure, title)


def _by_pair(points: Sequence[dict]):
    """(pair, its points by parameter count) for each pair, in first-seen order."""
    for pair in dict.fromkeys(p["pair"] for p in points):
        yield pair, sorted((p for p in points if p["pair"] == pair), key=lambda p: p["parameters"])


def size_trend(points: Sequence[dict], paper: Sequence[dict]):
    """Pearson r of log ranks against parameter count, one line per probe pair with its 95% bootstrap interval (which
    need not hold r); the paper's points as open markers of the same colour."""
    figure, axis = _subplots(figsize=(6.4, 4.2))
    colours = {}
    for pair, rows in _by_pair(points):
        sizes = [p["parameters"] for p in rows]
        (line,) = axis.plot(sizes, [p["r"] for p in rows], marker="o", label=f"{pair} (this toolkit)")
        colours[pair] = line.get_color()
        axis.vlines(sizes, [p["ci_low"] for p in rows], [p["ci_high"] for p in rows], color=colours[pair])
    for pair, rows in _by_pair(paper):
        axis.plot([p["parameters"] for p in rows], [p["r"] for p in rows], linestyle=":", marker="s", markerfacecolor="none",
                  color=colours.get(pair), label=f"{pair} (paper, OPT)")
    axis.set(xscale="log", xlabel="parameters", ylabel="Pearson r of log10 gold ranks",
             title="Agreement with the likelihood probes against model size (WN18RR)")
    axis.xaxis.set_minor_formatter(_matplotlib("ticker").NullFormatter())
    axis.axhline(0, color="grey", linewidth=0.5)
    axis.legend(fontsize=7)
    return figure
