"""Figures of the experiments (matplotlib, no display needed).

Each function returns a matplotlib Figure built without pyplot, so importing this module never
switches the caller's backend (a notebook keeps its inline figures) and nothing needs closing;
``ExperimentOutput.figure`` saves it (``Figure.savefig`` renders with Agg by itself).

matplotlib is the optional ``plots`` extra: it is imported when a figure is made, and without it
that call raises :class:`deer.platform.extras.MissingExtraError` naming the extra.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from deer.platform.extras import import_extra

PROBE_LABELS = {"deer": "DEER", "bear": "BEAR", "lama": "LAMA"}
FEATURE = "The experiments' figures"


def _matplotlib(module: str):
    return import_extra(f"matplotlib.{module}", "plots", FEATURE)


def _subplots(nrows: int = 1, ncols: int = 1, **kwargs):
    """(Figure, axes) as ``pyplot.subplots`` gives them, without pyplot's global state."""
    figure = _matplotlib("figure").Figure(figsize=kwargs.pop("figsize", None))
    return figure, figure.subplots(nrows, ncols, **kwargs)


def probe_label(probe: str) -> str:
    return PROBE_LABELS.get(probe, probe)


def _plain_log_ticks(axis) -> None:
    """Rank ticks as plain numbers (1, 10, 100) rather than 10^k or 2x10^1."""
    ticker = _matplotlib("ticker")
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def rank_by_token_length(token_lengths: np.ndarray, ranks_by_probe: dict[str, np.ndarray], title: str = ""):
    """Box plot of the gold tail's rank per tail token length, one panel per probe (paper Fig. 4).

    ``ranks_by_probe``: probe -> ranks aligned with ``token_lengths`` (NaN ranks are skipped).
    Ranks are drawn on a log axis; each box is labelled with its number of queries.
    """
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
        axis.set_yscale("log")
        _plain_log_ticks(axis.yaxis)
        axis.set_title(probe_label(probe))
        axis.set_xlabel("gold tail length (tokens)")
    axes[0][0].set_ylabel("rank of gold tail (log)")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def log_rank_scatter(panels: Sequence[dict], hit_k: int = 10):
    """Scatter plots of log rank vs log rank, with the Hit@k quadrants marked.

    ``panels``: dicts with keys row (e.g. model), column (e.g. "deer vs lama"), x, y (rank
    arrays), x_label, y_label, r (Pearson r of log ranks, shown in the corner).  Rows facet by
    model, columns by probe pair.  The lines at rank = k split hits from misses of each probe;
    each quadrant is annotated with its share of queries.
    """
    rows = list(dict.fromkeys(p["row"] for p in panels))
    columns = list(dict.fromkeys(p["column"] for p in panels))
    figure, axes = _subplots(len(rows), len(columns), figsize=(3.8 * len(columns), 3.6 * len(rows)), squeeze=False)
    for axis in axes.flat:
        axis.set_visible(False)
    for panel in panels:
        axis = axes[rows.index(panel["row"])][columns.index(panel["column"])]
        axis.set_visible(True)
        x = np.asarray(panel["x"], dtype=np.float64)
        y = np.asarray(panel["y"], dtype=np.float64)
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = x[keep], y[keep]
        axis.scatter(x, y, s=6, alpha=0.4, edgecolors="none")
        axis.set_xscale("log")
        axis.set_yscale("log")
        _plain_log_ticks(axis.xaxis)
        _plain_log_ticks(axis.yaxis)
        axis.axvline(hit_k + 0.5, color="grey", lw=0.8, ls="--")
        axis.axhline(hit_k + 0.5, color="grey", lw=0.8, ls="--")
        n = max(len(x), 1)
        for x_hit in (True, False):
            for y_hit in (True, False):
                share = np.mean(((x <= hit_k) == x_hit) & ((y <= hit_k) == y_hit)) if len(x) else 0.0
                axis.text(0.04 if x_hit else 0.96, 0.96 if not y_hit else 0.04, f"{share:.0%}",
                          transform=axis.transAxes, ha="left" if x_hit else "right",
                          va="top" if not y_hit else "bottom", fontsize=8, color="dimgrey")
        axis.set_xlabel(f"{panel['x_label']} rank (log)")
        axis.set_ylabel(f"{panel['y_label']} rank (log)")
        r = panel.get("r")
        r_text = f"r = {r:.2f}" if r is not None and np.isfinite(r) else "r = n/a"
        axis.set_title(f"{panel['row']}: {panel['column']}\n{r_text} (log ranks, n={n}); dashed: Hit@{hit_k}", fontsize=9)
    figure.tight_layout()
    return figure


def compute_time_fits(curves: Sequence[dict]):
    """Measured seconds per query-subset size with the fitted lines, one panel per scorer.

    ``curves``: dicts with scorer, sizes, times_by_repeat (list of lists), slope, intercept.
    """
    figure, axes = _subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False)
    for axis, curve in zip(axes[0], curves, strict=True):
        sizes = np.asarray(curve["sizes"], dtype=np.float64)
        for repeat, times in enumerate(curve["times_by_repeat"]):
            axis.plot(sizes, times, "o", ms=4, alpha=0.7, label=f"run {repeat + 1}")
        grid = np.linspace(0, sizes.max(), 50)
        axis.plot(grid, curve["intercept"] + curve["slope"] * grid, "-", color="black", lw=1, label="linear fit")
        axis.set_xlabel("|Q| (queries)")
        axis.set_ylabel("seconds")
        axis.set_title(curve["scorer"])
        axis.legend(fontsize=7)
    figure.tight_layout()
    return figure


def leaderboard_bars(labels: Sequence[str], values: Sequence[float], errors: Sequence[float], metric: str):
    """Horizontal bars of one metric per model, best on top, with standard-error whiskers."""
    order = np.argsort(np.asarray(values, dtype=np.float64), kind="stable")
    figure, axis = _subplots(figsize=(6, 0.4 * len(labels) + 1.2))
    axis.barh([labels[i] for i in order], [values[i] for i in order], xerr=[errors[i] for i in order], color="tab:blue")
    axis.set_xlabel(metric)
    figure.tight_layout()
    return figure


def metric_curves(steps: Sequence[int], series: dict[str, Sequence[float]], title: str = ""):
    """One panel per metric against the training step (one line per probe or query set):
    ``series`` maps "metric" or "metric | line label" to values in ``steps`` order."""
    metrics = list(dict.fromkeys(key.split(" | ")[0] for key in series))
    figure, axes = _subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.2), squeeze=False)
    for axis, metric in zip(axes[0], metrics, strict=True):
        labelled = False
        for key, values in series.items():
            name, _, line = key.partition(" | ")
            if name == metric:
                axis.plot(steps, values, marker="o", label=line or None)
                labelled = labelled or bool(line)
        axis.set_xlabel("training step")
        axis.set_ylabel(metric)
        if labelled:
            axis.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def size_trend(points: Sequence[dict], paper: Sequence[dict]):
    """Pearson r of log ranks against parameter count (log x), one line per probe pair, with the
    95% bootstrap interval as error bars; the paper's points as open markers of the same colour."""
    figure, axis = _subplots(figsize=(6.4, 4.2))
    colours = {}
    for pair in dict.fromkeys(p["pair"] for p in points):
        rows = sorted((p for p in points if p["pair"] == pair), key=lambda p: p["parameters"])
        x = [p["parameters"] for p in rows]
        y = [p["r"] for p in rows]
        errors = [[p["r"] - p["ci_low"] for p in rows], [p["ci_high"] - p["r"] for p in rows]]
        line = axis.errorbar(x, y, yerr=errors, marker="o", capsize=3, label=f"{pair} (this toolkit)")
        colours[pair] = line.lines[0].get_color()
    for pair in dict.fromkeys(p["pair"] for p in paper):
        rows = sorted((p for p in paper if p["pair"] == pair), key=lambda p: p["parameters"])
        axis.plot([p["parameters"] for p in rows], [p["r"] for p in rows], linestyle=":", marker="s", markerfacecolor="none",
                  color=colours.get(pair), label=f"{pair} (paper, OPT)")
    axis.set_xscale("log")
    axis.xaxis.set_minor_formatter(_matplotlib("ticker").NullFormatter())
    axis.set_xlabel("parameters")
    axis.set_ylabel("Pearson r of log10 gold ranks")
    axis.axhline(0, color="grey", linewidth=0.5)
    axis.legend(fontsize=7)
    axis.set_title("Agreement with the likelihood probes against model size (WN18RR)")
    return figure
