"""Intervals of a few numbers: the one home of the statistics that records and claims are built on.

- `t_interval`: the Student-t interval of the mean of a few values (a setting's per-seed means, scipy),
  clipped to bounds where the values cannot leave them; `log_interval` the same on the logs of positive
  ratios (a normalised time over seeds), exponentiated;
- `median_interval`: the percentile bootstrap of the median of a point's timed repeats, or of the ratio
  of two medians (`times.measured`, `times.normalized`);
- `bootstrap_interval`: scipy's BCa bootstrap of a statistic of paired per-example arrays (percentile
  where BCa is undefined; `sample_mean`, `pooled_ratio`, `pooled_ratio_difference` are the statistics
  the records and the report use, `pooled_ratio_quotient` the bench's speedups), a fixed generator so
  a report is reproducible;
- `wilson`, `binary_interval`: Wilson's interval of a proportion, at the effective sample size of a
  cluster sample where several seeds score each example (Kish's design effect);
- `mean_interval`: the interval of a record's score over its examples (`sweep.point` writes it):
  Wilson's for 0/1 scores, else the bootstrap of the mean.

Pure functions of numbers: it reads no records and knows no methods. The sweep (`point.py`,
`times.py`), the analysis (`analysis/compare.py`) and the verbs that measure (`bench`, `drafts`) import
it; what is averaged over which rows is theirs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
N_RESAMPLES = 9999
# Where scores (accuracy and pass@1 are 0/1, ROUGE an F-measure), acceptance rates and α lie
SCORE_RANGE = (0.0, 1.0)

Statistic = Callable[..., np.ndarray]


# ----------------------------------------------------------------------------- over seeds


def t_interval(
    values: Sequence[float], confidence: float = CONFIDENCE, *, bounds: tuple[float, float] | None = None
) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean of a few values (a setting's per-seed means,
    `scipy.stats.t.interval`), clipped to `bounds` where the values cannot leave them (the mean cannot
    either, so clipping loses no coverage). Values that are all equal: zero width; one value: NaN bounds;
    none present (None, NaN): all NaN."""
    x = np.asarray([v for v in values if v is not None and not pd.isna(v)], dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan
    sem = float(stats.sem(x))
    low, high = (
        (mean, mean)
        if sem == 0
        else (float(v) for v in stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem))
    )
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high


def log_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(geometric mean, low, high) of a few positive ratios (a setting's per-seed normalised times): the
    Student-t interval of the mean of their logs (`t_interval`), exponentiated. A ratio's interval is
    then positive and asymmetric about it, as a ratio's uncertainty is (1.19 over three seeds: never a
    negative time). Values ≤ 0 or missing are left out; one value: NaN bounds; none: all NaN."""
    x = np.asarray([v for v in values if v is not None and not pd.isna(v) and v > 0], dtype=float)
    return tuple(math.exp(v) if not math.isnan(v) else math.nan for v in t_interval(np.log(x), confidence))  # type: ignore[return-value]


# ----------------------------------------------------------------------------- over the repeats


def median_interval(
    runs: Sequence[float],
    baseline_runs: Sequence[float] | None = None,
    *,
    scale: float = 1.0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """The percentile-bootstrap interval of scale · median(runs), or with `baseline_runs` of
    scale · median(runs) / median(baseline_runs); (nan, nan) with fewer than two runs on a side.

    A record's time is the median of its repeats (robust to a pass a background job slowed), so the
    interval is the median's: a t-interval is the mean's and, with one slow pass, can miss the median.
    A point's repeats and its baseline's are timed minutes apart: repeat i of one shares nothing with
    repeat i of the other, so pairing them by index would be arbitrary; each side is resampled on
    its own. Percentile, not BCa: BCa fails on identical runs and is erratic with 3-10 repeats. With
    5 repeats the median's interval is about [min, max] (as order statistics: 94 % coverage). A fixed
    generator: the same runs always give the same interval (records reload identically)."""
    samples = [np.asarray(runs, dtype=float)] + (
        [np.asarray(baseline_runs, dtype=float)] if baseline_runs is not None else []
    )
    if any(s.size < 2 for s in samples):
        return math.nan, math.nan

    def statistic(*xs: np.ndarray, axis: int) -> np.ndarray:
        m = np.median(xs[0], axis=axis)
        return scale * (m / np.median(xs[1], axis=axis) if len(xs) > 1 else m)

    ci = stats.bootstrap(
        samples,
        statistic,
        vectorized=True,
        paired=False,
        method="percentile",
        n_resamples=1999,
        confidence_level=confidence,
        rng=np.random.default_rng(0),
    ).confidence_interval
    return float(ci.low), float(ci.high)


# ----------------------------------------------------------------------------- over examples


def sample_mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def pooled_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sum(a, axis=axis) / np.sum(b, axis=axis)  # Σ accepted / Σ proposed (or verified)


def pooled_ratio_difference(a1, b1, a2, b2, axis: int = -1) -> np.ndarray:
    return pooled_ratio(a1, b1, axis) - pooled_ratio(a2, b2, axis)


def pooled_ratio_quotient(a1, b1, a2, b2, axis: int = -1) -> np.ndarray:
    return pooled_ratio(a1, b1, axis) / pooled_ratio(a2, b2, axis)  # (Σ tokens / Σ seconds) over another's


def bootstrap_interval(
    statistic: Statistic,
    arrays: Sequence[np.ndarray],
    *,
    confidence: float = CONFIDENCE,
    alternative: str = "two-sided",
) -> tuple[float, float, float]:
    """(estimate, low, high) of `statistic` over paired per-example `arrays`: scipy's BCa bootstrap
    resampling examples (percentile where BCa is undefined). A one-sided `alternative` leaves the other
    bound infinite. Where nothing varies the interval is the estimate itself; fewer than 2 examples: NaN."""
    arrays = [np.asarray(a, dtype=float) for a in arrays]
    estimate = float(statistic(*arrays, axis=-1))
    n = len(arrays[0])
    if n < 2 or not math.isfinite(estimate):
        return estimate, math.nan, math.nan
    if all(np.ptp(a) == 0 for a in arrays):
        return estimate, *(  # a constant sample: every resample is the estimate
            (estimate, math.inf)
            if alternative == "greater"
            else (-math.inf, estimate)
            if alternative == "less"
            else (estimate, estimate)
        )
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # BCa's degenerate-distribution warning: the percentile one follows
            res = stats.bootstrap(
                arrays,
                statistic,
                paired=True,
                vectorized=True,
                n_resamples=N_RESAMPLES,
                confidence_level=confidence,
                alternative=alternative,
                method=method,
                rng=np.random.default_rng(0),
            )
        low, high = (float(v) for v in res.confidence_interval)
        if not (math.isnan(low) or math.isnan(high)):
            return estimate, low, high
    return estimate, math.nan, math.nan


def wilson(p: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval of a proportion p observed on n trials; n may be fractional (an
    effective sample size). For whole n and n·p it is scipy's
    `binomtest(k, n).proportion_ci(method="wilson")` (without continuity correction):

        (p + z²/2n ± z·sqrt(p(1 − p)/n + z²/4n²)) / (1 + z²/n),   z = Φ⁻¹(1 − (1 − confidence)/2)
    """
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def binary_interval(
    means: Sequence[float], runs: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(p, low, high) of 0/1 scores on n examples, example e scored m_e times (seeds) with mean s̄_e:
    p = mean_e s̄_e with Wilson's interval at the cluster sample's effective size (Kish's design effect,
    the examples are clusters of m seeds):

        n_eff = n·m / deff,   deff = max(1, var_cluster / var_binomial)
        var_cluster  = s²(s̄_e) / n          (the sample variance of the per-example means, over n)
        var_binomial = p(1 − p) / (n·m)      (as if all n·m scores were independent)

    m = Σ m_e / n. One run per example (m = 1): plain Wilson on k of n (scipy's `binomtest`), nothing to
    cluster. Seeds that agree within examples make deff > 1 and the interval wider than Wilson's on n·m;
    seeds that vary as much as independent draws leave deff ≈ 1. Where p is 0 or 1 (or n < 2) nothing
    measures how much seeds agree: deff = m, each example counted once (Wilson on n)."""
    s = np.asarray(means, dtype=float)
    m_e = np.asarray(runs, dtype=float)
    n, total = len(s), float(m_e.sum())
    p = float(s.mean())
    if np.all(m_e == 1):
        ci = stats.binomtest(int(round(p * n)), n).proportion_ci(confidence, method="wilson")
        return p, float(ci.low), float(ci.high)
    var_binomial = p * (1 - p) / total
    if n < 2 or var_binomial == 0:
        n_eff = float(n)
    else:
        var_cluster = float(s.var(ddof=1)) / n
        n_eff = total / max(1.0, var_cluster / var_binomial)
    return p, *wilson(p, n_eff, confidence)


def mean_interval(
    scores: Sequence[float], confidence: float = CONFIDENCE, *, bounds: tuple[float, float] = SCORE_RANGE
) -> tuple[float, float, float]:
    """(mean, low, high) of independent per-example scores: the interval of a record's score.

    Scores all at the `bounds` (0/1: right or wrong, passed or not) are a proportion: the Wilson score
    interval of k successes in n (`scipy.stats.binomtest(k, n).proportion_ci(method="wilson")`, as
    `binary_interval` with one run per example), rescaled to the bounds. It stays within them and has a
    width even when every score is 0 (0 of 20: [0, 0.16]), where a Student-t interval crosses the bounds
    near them and has none at them. Other scores (ROUGE's F-measure, in [0, 1], skewed, with a spike at
    0): the BCa bootstrap of the mean (`bootstrap_interval`, fixed generator), the interval the report
    gives the same rows (`compare.cell_intervals`). It needs no normal approximation and stays within
    the scores' own [min, max], so within any range they have; a t clipped to the range would stay
    symmetric about the mean where the scores are skewed. Constant scores that are not at the bounds:
    zero width (nothing varies to resample); one such score: NaN bounds. Raises on none."""
    x = np.asarray(scores, dtype=float)
    if x.size == 0:
        raise ValueError("mean_interval of no scores")
    low, high = bounds
    if np.isin(x, bounds).all():
        _, lo, hi = binary_interval((x == high).astype(float), np.ones(x.size), confidence)
        return float(x.mean()), low + (high - low) * lo, low + (high - low) * hi
    return bootstrap_interval(sample_mean, [x], confidence=confidence)
