"""Statistics the experiments report: correlations with p-values, linear fits, spreads (pure functions).

An input that makes a coefficient undefined (too few pairs, a constant column) gives NaN rather than an
exception, so experiments on small or degenerate subsets still write their other numbers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as scipy_stats

from deer.platform.validate import warn

NAN = float("nan")
# coefficient key -> scipy test; each coefficient comes with its two-sided p under "<name>_p"
_TESTS = {"pearson_r": "pearsonr", "spearman_rho": "spearmanr", "kendall_tau": "kendalltau"}


def finite_pairs(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Float arrays with every pair holding a NaN/inf dropped."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired inputs differ in shape: {x.shape} vs {y.shape}")
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def _defined(x: np.ndarray, y: np.ndarray, min_n: int) -> bool:
    return len(x) >= max(min_n, 2) and np.ptp(x) > 0 and np.ptp(y) > 0


def _scipy(test: str, x: np.ndarray, y: np.ndarray):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(scipy_stats, test)(x, y)


def _float(value) -> float:
    value = float(value)
    return value if math.isfinite(value) else NAN


SMALL_SAMPLE = 30  # pairs; below it p-values and intervals get a caveat in every table and JSON that shows them


def small_sample_note(n: int) -> str | None:
    """The caveat for a p-value or interval resting on ``n`` < SMALL_SAMPLE pairs (None otherwise)."""
    if 0 < n < SMALL_SAMPLE:
        return f"n = {n} < {SMALL_SAMPLE}: p-values and intervals rest on few pairs; read them as rough"
    return None


def caveat_lines(rows: Sequence[dict], *names: str) -> list[str]:
    """One line per row with a ``caveat``, naming the row by its ``names`` fields (a table's footnotes)."""
    return [f"- {', '.join(str(row.get(name)) for name in names)}: {row['caveat']}" for row in rows if row.get("caveat")]


EXACT_MAX_PAIRS = 8  # up to this many pairs the rank coefficients' p-values count every pairing (8! = 40,320)


def exact_rank_p(x: np.ndarray, y: np.ndarray) -> dict:
    """Two-sided p-values of Spearman's rho and Kendall's tau-b under the permutation null: the share of all pairings
    of ``y``'s values with ``x``'s (ties kept) whose coefficient is at least as far from 0.  scipy's approximations are
    far off at a few pairs: Spearman's t gives p = 0 at |rho| = 1 for any n, where 3 models come in reverse order 2 times in 6."""
    pairings = np.array(list(itertools.permutations(range(len(x)))))  # the first: the pairing observed
    ranks_x, ranks_y = scipy_stats.rankdata(x), scipy_stats.rankdata(y)[pairings]
    i, j = np.triu_indices(len(x), 1)
    # each coefficient times what no pairing changes: the ranks' covariance; concordant minus discordant pairs
    found = {"spearman_p": (ranks_y - ranks_y.mean()) @ (ranks_x - ranks_x.mean()),
             "kendall_p": (np.sign(ranks_y[:, i] - ranks_y[:, j]) * np.sign(ranks_x[i] - ranks_x[j])).sum(axis=1)}
    return {key: float(np.mean(np.abs(value) >= np.abs(value[0]) - 1e-9)) for key, value in found.items()}


def correlations(x: Sequence[float], y: Sequence[float], min_n: int = 3) -> dict:
    """Pearson r, Spearman rho and Kendall tau-b of the finite pairs, each with its two-sided p (exact for the rank
    coefficients at up to ``EXACT_MAX_PAIRS`` pairs); NaN with fewer than ``min_n`` pairs or a constant column."""
    x, y = finite_pairs(x, y)
    result = {"n": int(len(x))}
    defined = _defined(x, y, min_n)
    for key, test in _TESTS.items():
        found = _scipy(test, x, y) if defined else None
        result[key] = _float(found.statistic) if defined else NAN
        result[key.split("_")[0] + "_p"] = _float(found.pvalue) if defined else NAN
    if defined and len(x) <= EXACT_MAX_PAIRS:
        result.update(exact_rank_p(x, y))
    return result


def rank_correlations(ranks_a: Sequence[float], ranks_b: Sequence[float], base: float = 10.0) -> dict:
    """{"linear": correlations(a, b), "log": correlations(log a, log b)} of two rank vectors (log to ``base``):
    the paper reports Pearson of log ranks, as ranks span orders of magnitude."""
    a, b = finite_pairs(ranks_a, ranks_b)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("ranks must be positive (1 = best) to take logs")
    return {"linear": correlations(a, b), "log": correlations(np.log(a) / np.log(base), np.log(b) / np.log(base))}


@dataclasses.dataclass(frozen=True)
class LinearFit:
    """Least-squares line y = intercept + slope * x with standard errors (from the residuals)."""

    slope: float
    intercept: float
    slope_se: float
    intercept_se: float
    covariance: float  # cov(intercept, slope)
    r_squared: float
    n: int

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * x

    def predict_se(self, x: float) -> float:
        """Standard error of the fitted line's value at ``x`` (not of a new observation)."""
        variance = self.intercept_se**2 + (x**2) * self.slope_se**2 + 2 * x * self.covariance
        return math.sqrt(max(variance, 0.0))


def linear_fit(x: Sequence[float], y: Sequence[float]) -> LinearFit:
    """Ordinary least squares of y on x (at least two distinct x); standard errors from the residual variance
    with n - 2 degrees of freedom (zero when n = 2)."""
    x, y = finite_pairs(x, y)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("a linear fit needs at least two distinct x values")
    fit = scipy_stats.linregress(x, y)
    varies = np.ptp(y) > 0  # a constant y lies on the line exactly (scipy gives NaN errors there)
    r_squared = float(fit.rvalue**2) if varies else 1.0
    slope_se, intercept_se = (float(fit.stderr), float(fit.intercept_stderr)) if varies else (0.0, 0.0)
    return LinearFit(float(fit.slope), float(fit.intercept), slope_se, intercept_se, -float(x.mean()) * slope_se**2, r_squared, len(x))


def spread(values: Sequence[float]) -> dict:
    """Mean, sample standard deviation, min, max and n of repeated measurements."""
    values = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if len(values) == 0:
        return {"n": 0, "mean": NAN, "std": NAN, "min": NAN, "max": NAN}
    return {"n": int(len(values)), "mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "min": float(values.min()), "max": float(values.max())}


def repeated_fit_extrapolation(sizes: Sequence[float], times_by_repeat: Sequence[Sequence[float]], target: float) -> dict:
    """Fit time = a + b * size per repeat and pooled: the pooled prediction at ``target`` (with its se), the per-repeat spread."""
    sizes = np.asarray(sizes, dtype=np.float64)
    per_repeat = [linear_fit(sizes, times) for times in times_by_repeat]
    pooled = linear_fit(np.tile(sizes, len(times_by_repeat)), np.concatenate([np.asarray(t, float) for t in times_by_repeat]))
    return {"target": float(target), "pooled_fit": dataclasses.asdict(pooled), "prediction": pooled.predict(target),
            "prediction_se": pooled.predict_se(target), "per_repeat_fits": [dataclasses.asdict(fit) for fit in per_repeat],
            "per_repeat_predictions": spread([fit.predict(target) for fit in per_repeat])}


MIN_TAIL_RESAMPLES = 5  # resamples beyond each end of a percentile interval, at the least (200 for 95%)


def bootstrap_interval(statistic: Callable[..., float], *arrays: Sequence[float], n_resamples: int = 1000,
                       confidence: float = 0.95, seed: int = 0) -> dict:
    """Percentile bootstrap interval of ``statistic(*arrays)``, resampling rows jointly
    (``scipy.stats.bootstrap``, paired); resamples where the statistic is undefined are left out."""
    arrays = [np.asarray(a) for a in arrays]
    if len(arrays[0]) < 2:
        return {"low": NAN, "high": NAN, "resamples": 0}
    if n_resamples * (1 - confidence) / 2 < MIN_TAIL_RESAMPLES:  # each end is then one of a few extreme resamples
        warn(f"a {confidence:.0%} bootstrap interval from {n_resamples} resamples has {n_resamples * (1 - confidence) / 2:g} "
             f"of them beyond each end: it is no {confidence:.0%} interval; use at least "
             f"{math.ceil(2 * MIN_TAIL_RESAMPLES / (1 - confidence))} resamples (default 1,000)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about a degenerate distribution; undefined values are dropped below
        values = scipy_stats.bootstrap(arrays, statistic, n_resamples=n_resamples, paired=True, vectorized=False,
                                       method="percentile", rng=np.random.default_rng(seed)).bootstrap_distribution
    values = values[np.isfinite(values)]
    if not len(values):
        return {"low": NAN, "high": NAN, "resamples": 0}
    alpha = (1 - confidence) / 2
    return {"low": float(np.quantile(values, alpha)), "high": float(np.quantile(values, 1 - alpha)), "resamples": len(values)}


def pearson_r(x: Sequence[float], y: Sequence[float], min_n: int = 3) -> float:
    """Pearson r alone (NaN where undefined, as in :func:`correlations`): the bootstrap's cheap statistic."""
    x, y = finite_pairs(x, y)
    return _float(_scipy("pearsonr", x, y).statistic) if _defined(x, y, min_n) else NAN


def ordering_agreement(scores_a: Sequence[float], scores_b: Sequence[float], labels: Sequence[str] | None = None) -> dict:
    """How alike two probes order the same models (one score each, higher = knows more): Spearman and Kendall between
    the scores, and each ordering (a NaN score last)."""
    a, b = np.asarray(scores_a, dtype=np.float64), np.asarray(scores_b, dtype=np.float64)
    labels = list(labels) if labels is not None else [str(i) for i in range(len(a))]
    # Two models already give an ordering (rho = +-1); p-values then say it means little.
    result = correlations(a, b, min_n=2)
    return {"n_models": result["n"], "caveat": small_sample_note(result["n"]),
            **{key: result[key] for key in ("spearman_rho", "spearman_p", "kendall_tau", "kendall_p")},
            "order_a": [labels[i] for i in np.argsort(-a, kind="stable")],
            "order_b": [labels[i] for i in np.argsort(-b, kind="stable")]}
