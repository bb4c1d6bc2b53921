"""experiments.stats on constructed inputs with known answers."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments.stats import (
    bootstrap_interval,
    correlations,
    linear_fit,
    ordering_agreement,
    pearson_r,
    rank_correlations,
    repeated_fit_extrapolation,
    spread,
)


def test_perfect_ranking_correlates_fully():
    ranks = np.arange(1, 21)
    result = correlations(ranks, ranks)
    assert result["n"] == 20
    assert result["pearson_r"] == pytest.approx(1.0)
    assert result["spearman_rho"] == pytest.approx(1.0)
    assert result["kendall_tau"] == pytest.approx(1.0)
    assert result["pearson_p"] < 1e-10 and result["kendall_p"] < 1e-6


def test_inverted_ranking_correlates_negatively():
    ranks = np.arange(1, 21)
    result = correlations(ranks, ranks[::-1])
    assert result["pearson_r"] == pytest.approx(-1.0)
    assert result["spearman_rho"] == pytest.approx(-1.0)
    assert result["kendall_tau"] == pytest.approx(-1.0)


def test_known_pearson_value_and_p():
    # Textbook example: r = 0.7746 (= sqrt(0.6)), p two-sided from t with 3 df.
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    result = correlations(x, y)
    assert result["pearson_r"] == pytest.approx(math.sqrt(0.6), abs=1e-12)
    t = result["pearson_r"] * math.sqrt(3 / (1 - 0.6))
    assert result["pearson_p"] == pytest.approx(2 * scipy_stats.t.sf(t, 3), rel=1e-9)


def test_undefined_correlations_are_nan_not_errors():
    assert math.isnan(correlations([1, 2, 3, 4], [5, 5, 5, 5])["pearson_r"])  # constant column
    assert math.isnan(correlations([1, 2], [1, 2])["spearman_rho"])  # too few pairs
    result = correlations([1, 2, np.nan, 4, 5], [1, 2, 3, np.inf, 5])  # non-finite pairs dropped
    assert result["n"] == 3 and result["pearson_r"] == pytest.approx(1.0)


def test_log_rank_correlation_is_exact_for_power_laws():
    # rank_b = 5000 / rank_a: perfectly (inversely) linear in log scale, weak in linear scale.
    rank_a = np.array([1, 2, 5, 10, 30, 100, 400, 1000], dtype=float)
    rank_b = 5000 / rank_a
    result = rank_correlations(rank_a, rank_b)
    assert result["log"]["pearson_r"] == pytest.approx(-1.0)
    assert result["linear"]["pearson_r"] == pytest.approx(-0.4001038, abs=1e-6)
    assert rank_correlations(rank_a, 10 * rank_a**2)["log"]["pearson_r"] == pytest.approx(1.0)
    # Spearman is invariant under log.
    assert result["log"]["spearman_rho"] == pytest.approx(result["linear"]["spearman_rho"])
    expected = scipy_stats.pearsonr(np.log10(rank_a), np.log10(rank_a + 3)).statistic
    assert rank_correlations(rank_a, rank_a + 3)["log"]["pearson_r"] == pytest.approx(expected)


def test_log_rank_correlation_rejects_non_positive_ranks():
    with pytest.raises(ValueError):
        rank_correlations([0, 1, 2], [1, 2, 3])


def test_linear_fit_recovers_exact_line():
    x = np.array([16, 31, 46, 61, 76], dtype=float)
    fit = linear_fit(x, 3.0 + 2.5 * x)
    assert fit.slope == pytest.approx(2.5)
    assert fit.intercept == pytest.approx(3.0)
    assert fit.slope_se == pytest.approx(0.0, abs=1e-9)
    assert fit.r_squared == pytest.approx(1.0)
    assert fit.predict(93003) == pytest.approx(3.0 + 2.5 * 93003)


def test_linear_fit_uncertainty_matches_scipy():
    rng = np.random.default_rng(1)
    x = np.repeat(np.arange(16, 152, 15), 3).astype(float)
    y = 0.4 + 0.05 * x + rng.normal(0, 0.3, len(x))
    fit = linear_fit(x, y)
    reference = scipy_stats.linregress(x, y)
    assert fit.slope == pytest.approx(reference.slope)
    assert fit.intercept == pytest.approx(reference.intercept)
    assert fit.slope_se == pytest.approx(reference.stderr)
    assert fit.intercept_se == pytest.approx(reference.intercept_stderr)
    assert fit.r_squared == pytest.approx(reference.rvalue**2)
    # At x = mean(x) the line's standard error is sigma / sqrt(n).
    residual_sigma = math.sqrt(np.sum((y - fit.predict(x)) ** 2) / (len(x) - 2))
    assert fit.predict_se(float(x.mean())) == pytest.approx(residual_sigma / math.sqrt(len(x)))
    assert fit.predict_se(1000.0) > fit.predict_se(float(x.mean()))


def test_linear_fit_needs_two_distinct_x():
    with pytest.raises(ValueError):
        linear_fit([5, 5, 5], [1, 2, 3])


def test_repeated_fit_extrapolation_spread():
    sizes = [16, 31, 46]
    runs = [[1 + 2 * s for s in sizes], [3 + 2 * s for s in sizes]]
    result = repeated_fit_extrapolation(sizes, runs, target=100)
    assert result["per_repeat_predictions"]["mean"] == pytest.approx(202.0)
    assert result["per_repeat_predictions"]["std"] == pytest.approx(math.sqrt(2))
    assert result["pooled_fit"]["slope"] == pytest.approx(2.0)
    assert result["pooled_fit"]["intercept"] == pytest.approx(2.0)
    assert result["prediction"] == pytest.approx(202.0)
    assert result["prediction_se"] > 0


def test_spread_of_repeats():
    result = spread([1.0, 2.0, 3.0, float("nan")])
    assert result == {"n": 3, "mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}


def test_ordering_agreement_same_and_reversed():
    same = ordering_agreement([0.9, 0.5, 0.1], [0.7, 0.4, 0.2], ["a", "b", "c"])
    assert same["spearman_rho"] == pytest.approx(1.0) and same["kendall_tau"] == pytest.approx(1.0)
    assert same["order_a"] == same["order_b"] == ["a", "b", "c"]
    reversed_ = ordering_agreement([0.9, 0.5, 0.1], [0.1, 0.4, 0.8], ["a", "b", "c"])
    assert reversed_["spearman_rho"] == pytest.approx(-1.0) and reversed_["kendall_tau"] == pytest.approx(-1.0)
    assert reversed_["order_b"] == ["c", "b", "a"]
    two = ordering_agreement([0.2, 0.1], [0.3, 0.1], ["x", "y"])
    assert two["spearman_rho"] == pytest.approx(1.0)



@pytest.mark.parametrize("x, y", [
    ([0.9, 0.5, 0.1], [0.1, 0.4, 0.8]),  # 3 models in reverse order: the t approximation's p was 0
    ([0.12, 0.16, 0.12], [0.34, 0.19, 0.34]),  # tied scores, as a screen's repeated weights give
    ([1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 5]),
    ([1, 2, 2, 5, 8, 9], [3, 1, 2, 7, 9, 8]),
])
def test_rank_p_values_of_a_few_pairs_count_every_pairing(x, y):
    """Spearman's and Kendall's p at a few pairs (a screen's or compare_models' ordering of a few models): the share
    of all pairings of y with x whose coefficient, as scipy computes it, is at least as far from 0 as the one observed."""
    for key, test in (("spearman_p", scipy_stats.spearmanr), ("kendall_p", scipy_stats.kendalltau)):
        observed = abs(test(x, y).statistic)
        null = [abs(test(x, [y[i] for i in order]).statistic) for order in itertools.permutations(range(len(x)))]
        exact = np.mean(np.asarray(null) >= observed - 1e-9)
        assert correlations(x, y)[key] == pytest.approx(exact)
        assert ordering_agreement(x, y)[key] == pytest.approx(exact)


def test_bootstrap_interval_brackets_the_statistic():
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    y = x + rng.normal(size=200)
    interval = bootstrap_interval(pearson_r, x, y, n_resamples=300, seed=0)
    r = pearson_r(x, y)
    assert interval["low"] < r < interval["high"]
    assert 0.5 < interval["low"] and interval["high"] < 0.9  # true r = 1/sqrt(2) = 0.707
    exact = bootstrap_interval(pearson_r, np.arange(10.0), np.arange(10.0) * 3, n_resamples=50)
    assert exact["low"] == pytest.approx(1.0) and exact["high"] == pytest.approx(1.0)


def test_the_bootstrap_of_pearson_r_computes_only_pearson_r(monkeypatch):
    """Bug 5: each resample of the Pearson r bootstrap also computed Spearman and Kendall with p-values."""
    import scipy.stats

    from experiments import stats

    calls = {"spearmanr": 0, "kendalltau": 0}
    for name in calls:
        real = getattr(scipy.stats, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(stats.scipy_stats, name, counting)
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    interval = stats.bootstrap_interval(stats.pearson_r, x, y, n_resamples=200)
    assert calls == {"spearmanr": 0, "kendalltau": 0}
    assert interval["resamples"] == 200 and interval["low"] < stats.pearson_r(x, y) < interval["high"]
    assert stats.pearson_r(x, y) == stats.correlations(x, y)["pearson_r"]  # the same number as before
    assert math.isnan(stats.pearson_r([1, 2], [3, 4])) and math.isnan(stats.pearson_r([1, 1, 1], [1, 2, 3]))


def test_linear_fit_of_a_constant_has_no_uncertainty():
    fit = linear_fit(np.arange(5.0), np.full(5, 3.0))
    assert (fit.slope, fit.intercept, fit.slope_se, fit.intercept_se, fit.r_squared) == (0.0, 3.0, 0.0, 0.0, 1.0)


def test_small_samples_carry_a_caveat_wherever_a_p_value_or_interval_is_shown():
    """Issue 22.7: a p-value or interval on fewer than 30 pairs says so (JSON rows, cloze summary, orderings)."""
    from experiments.cloze_report import pair_agreement, summary_markdown
    from experiments.stats import SMALL_SAMPLE, caveat_lines, ordering_agreement, small_sample_note

    assert small_sample_note(0) is None and small_sample_note(SMALL_SAMPLE) is None
    assert small_sample_note(7) == "n = 7 < 30: p-values and intervals rest on few pairs; read them as rough"
    rng = np.random.default_rng(0)
    few = pair_agreement(rng.integers(1, 50, 10), rng.integers(1, 50, 10), np.zeros(10), np.zeros(10), bootstrap=20)
    many = pair_agreement(rng.integers(1, 50, 40), rng.integers(1, 50, 40), np.zeros(40), np.zeros(40), bootstrap=20)
    assert few["caveat"] == small_sample_note(10) and many["caveat"] is None
    assert ordering_agreement([0.1, 0.3, 0.2], [0.2, 0.3, 0.1], ["a", "b", "c"])["caveat"] == small_sample_note(3)
    rows = [{"kind": "relation", "mode": "template", "pair": "deer vs bear", **few},
            {"kind": "relation", "mode": "template-free", "pair": "deer vs bear", **many}]
    assert caveat_lines(rows, "kind", "mode", "pair") == [f"- relation, template, deer vs bear: {small_sample_note(10)}"]
    summary = summary_markdown({}, rows, [])
    assert summary.endswith(f"Small samples:\n\n- relation, template, deer vs bear: {small_sample_note(10)}\n")


def test_a_bootstrap_interval_from_too_few_resamples_is_named():
    """`--bootstrap 1` printed a one-resample "95% CI" (its two ends equal), and any count below about 40 gave a
    percentile interval whose ends are the extreme resamples: no 95% interval, shown as one.  Fewer than 5 resamples
    beyond each end (200 for 95%) is now named in a warning; the interval is still returned as computed."""
    from deer.platform.validate import DeerWarning
    from experiments.stats import bootstrap_interval, pearson_r

    x = np.arange(20.0)
    y = x + np.random.default_rng(0).normal(size=20)
    for resamples, named in ((1, True), (10, True), (199, True), (200, False), (1000, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            interval = bootstrap_interval(pearson_r, x, y, n_resamples=resamples)
        said = [str(w.message) for w in caught if issubclass(w.category, DeerWarning)]
        assert bool(said) == named and interval["resamples"] == resamples, (resamples, said)
        assert not said or f"from {resamples} resamples" in said[0]


def test_ordering_agreement_counts_only_the_models_it_correlated():
    """n_models (and its small-sample caveat) counted a model with a NaN score, which the correlation left out."""
    from experiments.stats import ordering_agreement

    ordering = ordering_agreement([0.9, float("nan"), 0.5, 0.1], [0.7, 0.9, 0.4, 0.2], ["a", "b", "c", "d"])
    assert ordering["n_models"] == 3 and ordering["spearman_rho"] == 1.0
    assert ordering["order_a"] == ["a", "c", "d", "b"]  # a NaN score orders last
