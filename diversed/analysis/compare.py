"""Claims from records: each setting's mean over seeds with its interval, and paired differences.

The unit of resampling is the EXAMPLE. A setting run with several seeds scores every example once
per seed; an example's value is its mean over those seeds, so one example's draws stay together
and an interval covers both what the prompts were and how decoding fell (a cluster bootstrap):

    score        = mean_e s̄_e,                     s̄_e = mean over seeds of example e's score
    acceptance   = Σ_e accepted_e / Σ_e proposed_e   (accepted / proposed drafts, every seed summed)
    α            = Σ_e accepted_e / Σ_e verified_e   (accepted / drafts verified up to the first rejection)
    Δ(A − B)     = the same statistic of A minus B's on the examples both scored (paired by example)

Intervals are scipy's BCa bootstrap over examples (`scipy.stats.bootstrap`, fixed generator, so a
report is reproducible), two-sided unless asked; a one-sided one is for non-inferiority:
quality(A) ≥ quality(B) − δ is shown when the lower one-sided bound of Δ exceeds −δ.
Records without per-example rows (written elsewhere, or before the rows had both denominators) fall
back to a Student-t interval over the per-seed values (`times.t_interval`, clipped to [0, 1]), and to
the record's own interval with one seed. That one, the interval of a record's score over its examples,
is `mean_interval` (evaluate writes it): Wilson's for 0/1 scores, else the bootstrap above.

`mean_over_seeds` gives one row per setting (the tables' and figures' input); `paired` one
difference; `verdict` the word a table may print. It reads per-example rows through
`results.read_examples` and writes nothing; which setting a table shows is `fronts`' business.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from diversed.sweep.methods import knobs
from diversed.sweep.results import read_examples
from diversed.sweep.times import CONFIDENCE, t_interval


def setting_fields() -> tuple[str, ...]:
    """What identifies one setting across seeds: the pair, task and method, every registered method's knob
    fields (`methods.knobs`), N, T, which examples and the settings groups."""
    return (
        "pair",
        "task",
        "metric",
        "method",
        *knobs(),
        "head_task",
        "num_draft_tokens",
        "temperature",
        "n_examples",
        "split",
        "settings_group",
        "comparison_group",
    )


# The values averaged over seeds.
VALUE_FIELDS = (
    "score",
    "acceptance_rate",
    "alpha",
    "mean_tv",
    "normalized_time",
    "normalized_latency",
    "latency_s",
    "latency_per_token_s",
    "latency_new_tokens",  # one latency pass's new tokens (over its `latency_examples`)
    "latency_examples",
    "wall_time_s",
    "time_per_token_s",
    "mean_w",
    "empty_rate",  # completions with nothing to score once cut at the stop sequences
    "new_tokens",
)
# The intervals `mean_over_seeds` adds: (value, low, high) columns.
INTERVALS = {
    "score": ("score_ci_low", "score_ci_high"),
    "acceptance_rate": ("acceptance_ci_low", "acceptance_ci_high"),
    "alpha": ("alpha_ci_low", "alpha_ci_high"),
}

N_RESAMPLES = 9999
# Where scores (accuracy and pass@1 are 0/1, ROUGE an F-measure), acceptance rates and α lie
SCORE_RANGE = (0.0, 1.0)

Statistic = Callable[..., np.ndarray]


# ----------------------------------------------------------------------------- statistics (pure)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sum(a, axis=axis) / np.sum(b, axis=axis)  # Σ accepted / Σ proposed (or verified)


def _ratio_difference(a1, b1, a2, b2, axis: int = -1) -> np.ndarray:
    return _ratio(a1, b1, axis) - _ratio(a2, b2, axis)


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


def mean_interval(
    scores: Sequence[float], confidence: float = CONFIDENCE, *, bounds: tuple[float, float] = SCORE_RANGE
) -> tuple[float, float, float]:
    """(mean, low, high) of independent per-example scores: the interval of a record's score.

    Scores all at the `bounds` (0/1: right or wrong, passed or not) are a proportion: the Wilson score
    interval of k successes in n (`scipy.stats.binomtest(k, n).proportion_ci(method="wilson")`), rescaled
    to the bounds. It stays within them and has a width even when every score is 0 (0 of 20: [0, 0.16]),
    where a Student-t interval crosses the bounds near them and has none at them. Other scores (ROUGE's
    F-measure, in [0, 1], skewed, with a spike at 0): the BCa bootstrap of the mean (`bootstrap_interval`,
    fixed generator), the interval the report gives the same rows (`cell_intervals`). It needs no normal
    approximation and stays within the scores' own [min, max], so within any range they have; a t clipped
    to the range would stay symmetric about the mean where the scores are skewed. Constant scores that are
    not at the bounds: zero width (nothing varies to resample); one such score: NaN bounds. Raises on none."""
    x = np.asarray(scores, dtype=float)
    if x.size == 0:
        raise ValueError("mean_interval of no scores")
    low, high = bounds
    if np.isin(x, bounds).all():
        ci = stats.binomtest(int(np.sum(x == high)), x.size).proportion_ci(confidence, method="wilson")
        return float(x.mean()), low + (high - low) * float(ci.low), low + (high - low) * float(ci.high)
    return bootstrap_interval(_mean, [x], confidence=confidence)


# ----------------------------------------------------------------------------- per-example rows


def per_example(records: pd.DataFrame) -> pd.DataFrame | None:
    """One row per example of a setting's records (one per seed): its score averaged over the seeds and
    its accepted / proposed / verified drafts summed over them, indexed by example id. None where a
    record lacks rows (no `run_dir`, a missing examples file, fewer rows than `n_examples`)."""
    frames = []
    for _, r in records.iterrows():
        run_dir = r.get("run_dir")
        if run_dir is None or pd.isna(run_dir):
            return None
        try:
            rows = read_examples(run_dir, r["key"])
        except FileNotFoundError:
            return None
        n = r.get("n_examples")
        if not rows or (n is not None and not pd.isna(n) and len(rows) != int(n)):
            return None  # rows missing (or only some kept): the record's own numbers stand
        frames.append(pd.DataFrame(rows))
    d = pd.concat(frames, ignore_index=True)
    for f in ("accepted_drafts", "proposed_drafts", "verified_drafts"):
        d[f] = pd.to_numeric(d[f], errors="coerce") if f in d else np.nan
    g = d.groupby(d["example_id"].astype(str), sort=True)
    return pd.DataFrame(
        {
            "score": g["score"].mean(),
            "accepted": g["accepted_drafts"].sum(min_count=1),
            "proposed": g["proposed_drafts"].sum(min_count=1),
            "verified": g["verified_drafts"].sum(min_count=1),
        }
    )


def cell_intervals(ex: pd.DataFrame, *, confidence: float = CONFIDENCE) -> dict[str, float]:
    """Score, acceptance rate and α of one setting with their intervals, from `per_example` rows (the
    cluster bootstrap over examples; a score of 0 or 1 on every example: `mean_interval`'s Wilson)."""
    out: dict[str, float] = {}
    s = ex["score"].to_numpy(dtype=float)
    # every example right (or every one wrong) leaves nothing to resample: Wilson's interval over the examples
    constant = len(s) > 1 and np.ptp(s) == 0 and np.isin(s, SCORE_RANGE).all()
    score = (
        mean_interval(s, confidence) if constant else bootstrap_interval(_mean, [s], confidence=confidence)
    )
    out.update(zip(("score", *INTERVALS["score"]), score, strict=True))
    for field, denominator in (("acceptance_rate", "proposed"), ("alpha", "verified")):
        if ex[denominator].notna().all() and ex["accepted"].notna().all() and ex[denominator].sum() > 0:
            values = bootstrap_interval(_ratio, [ex["accepted"], ex[denominator]], confidence=confidence)
            out.update(zip((field, *INTERVALS[field]), values, strict=True))
    return out


# ----------------------------------------------------------------------------- one row per setting


def mean_over_seeds(
    df: pd.DataFrame, *, examples: bool = True, confidence: float = CONFIDENCE
) -> pd.DataFrame:
    """One row per setting (`setting_fields()`: settings apart from the seed are never averaged together):
    the mean over seeds of each of `VALUE_FIELDS`, `n_seeds`, and the intervals of `INTERVALS`.

    With `examples` (and records that have `run_dir` and their per-example rows) the score, the
    acceptance rate and α are recomputed over examples × seeds with cluster-bootstrap intervals
    (module docstring); otherwise a t-interval over the seeds' values (within [0, 1]), or with one seed
    the record's own score interval. `interval_from` says which: "examples", "seeds" or "record"."""
    cols = [c for c in setting_fields() if c in df]
    values = [c for c in VALUE_FIELDS if c in df]
    rows = []
    for _, g in df.groupby(cols, dropna=False, sort=False):
        row = g.iloc[0][cols].to_dict()
        row.update({v: pd.to_numeric(g[v], errors="coerce").mean() for v in values})
        row.update(n_seeds=int(g["seed"].nunique()) if "seed" in g else len(g), interval_from="seeds")
        for field, (low, high) in INTERVALS.items():
            if field in g:
                per_seed = pd.to_numeric(g[field], errors="coerce")
                _, row[low], row[high] = t_interval(per_seed, confidence, bounds=SCORE_RANGE)
        if len(g) == 1 and {"score_ci_low", "score_ci_high"} <= set(g):
            row.update(
                score_ci_low=g["score_ci_low"].iloc[0],
                score_ci_high=g["score_ci_high"].iloc[0],
                interval_from="record",
            )
        ex = per_example(g) if examples and "run_dir" in g else None
        if ex is not None and len(ex):
            row.update(cell_intervals(ex, confidence=confidence), interval_from="examples", n_scored=len(ex))
        rows.append(row)
    out = pd.DataFrame(rows)
    for low, high in INTERVALS.values():
        for c in (low, high):
            out[c] = pd.to_numeric(out[c], errors="coerce") if c in out else np.nan
    return out


# ----------------------------------------------------------------------------- paired differences


def paired(
    a: pd.DataFrame,
    b: pd.DataFrame,
    what: str = "score",
    *,
    confidence: float = CONFIDENCE,
    alternative: str = "two-sided",
) -> dict[str, float]:
    """A − B on the examples both scored (`per_example` frames), paired by example: `what` is "score"
    (the mean), "acceptance_rate" (accepted / proposed) or "alpha" (accepted / verified). Returns
    {diff, low, high, n}; NaN where the rows lack what is compared."""
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    if what == "score":
        est = bootstrap_interval(
            _mean,
            [a["score"].to_numpy() - b["score"].to_numpy()],
            confidence=confidence,
            alternative=alternative,
        )
    else:
        den = {"acceptance_rate": "proposed", "alpha": "verified"}[what]
        cols = [a["accepted"], a[den], b["accepted"], b[den]]
        if len(common) == 0 or any(c.isna().any() for c in cols) or a[den].sum() == 0 or b[den].sum() == 0:
            return {"diff": math.nan, "low": math.nan, "high": math.nan, "n": len(common)}
        est = bootstrap_interval(_ratio_difference, cols, confidence=confidence, alternative=alternative)
    return dict(zip(("diff", "low", "high"), est, strict=True)) | {"n": len(common)}


def verdict(low: float, high: float) -> str:
    """What a two-sided interval of A − B allows one to say of A against B."""
    if math.isnan(low) or math.isnan(high):
        return "unknown"
    return "better" if low > 0 else "worse" if high < 0 else "no difference shown"


def non_inferior(
    a: pd.DataFrame, reference: pd.DataFrame, margin: float, *, confidence: float = CONFIDENCE
) -> dict:
    """Is quality(A) ≥ quality(reference) − margin? The lower bound of the one-sided `confidence` interval
    of the paired score difference A − reference must exceed −margin. Returns {diff, low, n, holds}."""
    d = paired(a, reference, "score", confidence=confidence, alternative="greater")
    return {"diff": d["diff"], "low": d["low"], "n": d["n"], "holds": bool(d["low"] > -margin)}
