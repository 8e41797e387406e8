"""Claims from records: each setting's mean over seeds with its interval, and paired differences.

The unit of resampling is the EXAMPLE. A setting run with several seeds scores every example once
per seed; an example's value is its mean over those seeds, so one example's draws stay together
and an interval covers both what the prompts were and how decoding fell (a cluster bootstrap):

    score        = mean_e s̄_e,                     s̄_e = mean over seeds of example e's score
    acceptance   = Σ_e accepted_e / Σ_e proposed_e   (accepted / proposed drafts, every seed summed)
    α            = Σ_e accepted_e / Σ_e verified_e   (accepted / drafts verified up to the first rejection)
    Δ(A − B)     = the same statistic of A minus B's on the examples both scored (paired by example)

Intervals are scipy's BCa bootstrap over examples (`intervals.bootstrap_interval`: `scipy.stats.bootstrap`,
fixed generator, so a report is reproducible), two-sided unless asked; a one-sided one is for non-inferiority:
quality(A) ≥ quality(B) − δ is shown when the lower one-sided bound of Δ exceeds −δ, and where it is
not, `examples_needed` says how many examples would show it (80 % power, at the differences' spread).
A score whose every per-record value is 0 or 1 (accuracy, pass@1) is a proportion instead: Wilson's
interval, at the effective sample size of the cluster sample where several seeds score each example
(`binary_interval`: n_eff = n·m / deff, Kish's design effect deff = max(1, var_cluster / var_binomial)).
Records without per-example rows (written elsewhere, or before the rows had both denominators) fall
back to a Student-t interval over the per-seed values (`intervals.t_interval`, clipped to [0, 1]), and
to the record's own interval with one seed. That one, the interval of a record's score over its
examples, is `intervals.mean_interval` (evaluate writes it): Wilson's for 0/1 scores, else the
bootstrap above. The interval statistics themselves live in `sweep/intervals.py`; this module says
which rows they are computed over.

Many paired differences in one table are tested together: each gets the p-value of a paired
randomisation test (`randomization_p`: A and B swapped within examples), and `holm` adjusts a table's
p-values so that "better" / "worse" (`holm_verdict`) hold at a family-wise error rate of 5 %.

`mean_over_seeds` gives one row per setting (the tables' and figures' input); `paired` one
difference, `pooled_difference` one over many cells (tasks, temperatures) with examples as clusters;
`verdict` the word an interval alone allows, `holm_verdict` the one a table of many tests prints.
It reads per-example rows through `results.read_examples` and writes nothing; which setting a table
shows is `fronts`' business.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy.stats import norm

from diversed.sweep.intervals import (
    CONFIDENCE,
    SCORE_RANGE,
    binary_interval,
    bootstrap_interval,
    pooled_ratio,
    pooled_ratio_difference,
    sample_mean,
    t_interval,
)
from diversed.sweep.methods import knobs
from diversed.sweep.results import read_examples


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
    "latency_first_token_s",  # the timed examples' mean time to their first new token
    "wall_time_s",
    "time_per_token_s",
    "mean_w",
    "empty_rate",  # completions with nothing to score once cut at the stop sequences
    "capped_rate",  # completions that ran to the task's max_new_tokens
    "new_tokens",
)
# The intervals `mean_over_seeds` adds: (value, low, high) columns.
INTERVALS = {
    "score": ("score_ci_low", "score_ci_high"),
    "acceptance_rate": ("acceptance_ci_low", "acceptance_ci_high"),
    "alpha": ("alpha_ci_low", "alpha_ci_high"),
}


# ----------------------------------------------------------------------------- per-example rows


def per_example(records: pd.DataFrame) -> pd.DataFrame | None:
    """One row per example of a setting's records (one per seed): its score averaged over the seeds,
    how many scores that mean is of (`runs`) and whether each was 0 or 1 (`binary`), and its accepted /
    proposed / verified drafts summed over them, indexed by example id. None where a record lacks rows
    (no `run_dir`, a missing examples file, fewer rows than `n_examples`)."""
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
    d["binary"] = d["score"].isin(SCORE_RANGE)
    g = d.groupby(d["example_id"].astype(str), sort=True)
    return pd.DataFrame(
        {
            "score": g["score"].mean(),
            "runs": g["score"].count(),
            "binary": g["binary"].all(),
            "accepted": g["accepted_drafts"].sum(min_count=1),
            "proposed": g["proposed_drafts"].sum(min_count=1),
            "verified": g["verified_drafts"].sum(min_count=1),
        }
    )


def cell_intervals(ex: pd.DataFrame, *, confidence: float = CONFIDENCE) -> dict[str, float]:
    """Score, acceptance rate and α of one setting with their intervals, from `per_example` rows: the
    cluster bootstrap over examples, except for 0/1 scores (every run of every example 0 or 1, `binary`):
    Wilson's interval at the design effect's effective size (`binary_interval`; one seed: plain Wilson).
    Rows without `runs` / `binary` count one run per example, binary where every mean is 0 or 1."""
    out: dict[str, float] = {}
    s = ex["score"].to_numpy(dtype=float)
    runs = ex["runs"].to_numpy(dtype=float) if "runs" in ex else np.ones(len(s))
    binary = bool(ex["binary"].all()) if "binary" in ex else bool(np.isin(s, SCORE_RANGE).all())
    score = (
        binary_interval(s, runs, confidence)
        if binary and len(s)
        else bootstrap_interval(sample_mean, [s], confidence=confidence)
    )
    out.update(zip(("score", *INTERVALS["score"]), score, strict=True))
    for field, denominator in (("acceptance_rate", "proposed"), ("alpha", "verified")):
        if ex[denominator].notna().all() and ex["accepted"].notna().all() and ex[denominator].sum() > 0:
            values = bootstrap_interval(
                pooled_ratio, [ex["accepted"], ex[denominator]], confidence=confidence
            )
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
    p_value: bool = False,
) -> dict[str, float]:
    """A − B on the examples both scored (`per_example` frames), paired by example: `what` is "score"
    (the mean), "acceptance_rate" (accepted / proposed) or "alpha" (accepted / verified). Returns
    {diff, low, high, n}, with `p_value` also p, the two-sided p-value of the paired randomisation test
    (`randomization_p`); NaN where the rows lack what is compared."""
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    if what == "score":
        columns = [["score"], ["score"]]
        est = bootstrap_interval(
            sample_mean,
            [score_differences(a, b)],
            confidence=confidence,
            alternative=alternative,
        )
    else:
        den = {"acceptance_rate": "proposed", "alpha": "verified"}[what]
        columns = [["accepted", den], ["accepted", den]]
        cols = [a["accepted"], a[den], b["accepted"], b[den]]
        if len(common) == 0 or any(c.isna().any() for c in cols) or a[den].sum() == 0 or b[den].sum() == 0:
            return {"diff": math.nan, "low": math.nan, "high": math.nan, "n": len(common)} | (
                {"p": math.nan} if p_value else {}
            )
        est = bootstrap_interval(
            pooled_ratio_difference, cols, confidence=confidence, alternative=alternative
        )
    out = dict(zip(("diff", "low", "high"), est, strict=True)) | {"n": len(common)}
    if p_value:
        sides = [
            np.stack([f[c].to_numpy(dtype=float) for c in cs]) for f, cs in zip((a, b), columns, strict=True)
        ]
        statistic = _sum_difference(len(common)) if what == "score" else _sum_ratio_difference
        out["p"] = randomization_p(*sides, statistic) if len(common) else math.nan
    return out


# Paired randomisation test. Under H0 "A and B are exchangeable within each example" swapping an example's
# A and B values changes nothing in law; the two-sided p-value over R random swap patterns S (each example
# swapped with probability 1/2, fixed generator) is
#     p = (1 + #{r : |T(S_r)| ≥ |T_obs|}) / (1 + R)
# For a score T = mean_e (a_e − b_e): a swap flips the sign of d_e = a_e − b_e (the sign-flip test). For an
# acceptance rate T = Σ acc_A / Σ prop_A − Σ acc_B / Σ prop_B: a swap exchanges an example's counts. Both
# depend on the swapped sums only: Σ_e A'_e = Σ A + S·(B − A), Σ_e B'_e = Σ B − S·(B − A), one matrix
# product per batch of patterns.
N_FLIPS = 9999


def _sum_difference(n: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    return lambda sa, sb: (sa[..., 0] - sb[..., 0]) / n  # mean(a) − mean(b) from the sums


def _sum_ratio_difference(sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return sa[..., 0] / sa[..., 1] - sb[..., 0] / sb[..., 1]  # Σ acc / Σ prop of A minus B's


def randomization_p(
    a: np.ndarray,
    b: np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    n_flips: int = N_FLIPS,
    seed: int = 0,
) -> float:
    """Two-sided p-value of the paired randomisation test (formula above): `a` and `b` are [k, n], k
    per-example quantities of A and of B on the same n examples; `statistic(ΣA, ΣB)` maps their sums
    ([..., k] each) to T. Vectorised, in batches of 1000 swap patterns; a fixed generator (`seed`)."""
    a, b = np.atleast_2d(np.asarray(a, dtype=float)), np.atleast_2d(np.asarray(b, dtype=float))
    sa, sb, moved_by = a.sum(1), b.sum(1), (b - a).T  # [k], [k], [n, k]
    t_obs = abs(float(statistic(sa, sb)))
    if not math.isfinite(t_obs):
        return math.nan
    rng, extreme, done = np.random.default_rng(seed), 0, 0
    tolerance = 1e-12 * max(1.0, t_obs)  # equal statistics computed in another order count as ties
    while done < n_flips:
        r = min(1000, n_flips - done)
        moved = (rng.random((r, a.shape[1])) < 0.5).astype(float) @ moved_by  # [r, k]
        t = np.abs(statistic(sa + moved, sb - moved))
        extreme += int(np.sum(t >= t_obs - tolerance))
        done += r
    return (1 + extreme) / (1 + n_flips)


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the given order (NaN stays NaN and is not counted among the
    m tests). With the m p-values sorted, p_(1) ≤ ... ≤ p_(m):
        p̃_(i) = min(1, max_{j ≤ i} (m − j + 1)·p_(j))
    and rejecting where p̃ < α keeps the family-wise error rate at α whatever the tests' dependence."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = len(order)
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def verdict(low: float, high: float) -> str:
    """What a two-sided interval of A − B allows one to say of A against B."""
    if math.isnan(low) or math.isnan(high):
        return "unknown"
    return "better" if low > 0 else "worse" if high < 0 else "no difference shown"


def holm_verdict(diff: float, p_adjusted: float, alpha: float = 0.05) -> str:
    """What a difference A − B allows one to say of A against B among many tests: "better" / "worse" (by
    the sign of `diff`) only where its Holm-adjusted p-value (`holm`) is below the family-wise `alpha`."""
    if math.isnan(diff) or math.isnan(p_adjusted):
        return "unknown"
    if p_adjusted >= alpha or diff == 0:
        return "no difference shown"
    return "better" if diff > 0 else "worse"


def non_inferior(
    a: pd.DataFrame, reference: pd.DataFrame, margin: float, *, confidence: float = CONFIDENCE
) -> dict:
    """Is quality(A) ≥ quality(reference) − margin? The lower bound of the one-sided `confidence` interval
    of the paired score difference A − reference must exceed −margin. Returns {diff, low, n, holds}.
    Also the examples a test at this margin would need to show it with 80 % power (`examples_needed`),
    at the paired differences' observed spread: were A as good as the reference (`n_needed`), and were
    it worse by the difference observed (`n_needed_at_diff`)."""
    d = paired(a, reference, "score", confidence=confidence, alternative="greater")
    diffs = score_differences(a, reference)
    return {
        "diff": d["diff"],
        "low": d["low"],
        "n": d["n"],
        "holds": bool(d["low"] > -margin),
        "n_needed": examples_needed(diffs, margin, 0.0, confidence),
        "n_needed_at_diff": examples_needed(diffs, margin, d["diff"], confidence),
    }


def pooled_difference(
    cells: Sequence[pd.Series], *, confidence: float = CONFIDENCE, p_value: bool = False
) -> dict[str, float]:
    """One claim over many cells: `cells` are paired score differences A − B, one Series per cell (a
    task, temperature, N, or another pair of settings), each indexed by its examples' cluster (the task
    and example id: an example decoded in several cells is one cluster). Each cluster's differences are
    averaged over the cells it was decoded in, and the estimate is their mean over clusters,

        Δ = mean_e d̄_e,   d̄_e = mean over the cells c holding e of d_ce

    (where every cell of a task holds all its examples: each task's mean over its cells' Δ, the tasks
    weighted by their examples), its interval the BCa bootstrap over clusters, so an example's cells stay
    together and their dependence (one problem at two temperatures) is kept. Returns {diff, low, high,
    n (clusters), cells}, with `p_value` also p of the paired sign-flip test on the d̄_e
    (`randomization_p`). NaN where no cell has a difference."""
    found = [c.dropna() for c in cells if len(c.dropna())]
    out = {"diff": math.nan, "low": math.nan, "high": math.nan, "n": 0, "cells": len(found)}
    if p_value:
        out["p"] = math.nan
    if not found:
        return out
    every = pd.concat(found)
    per_cluster = every.groupby(level=list(range(every.index.nlevels))).mean().to_numpy(dtype=float)
    out.update(
        zip(
            ("diff", "low", "high"),
            bootstrap_interval(sample_mean, [per_cluster], confidence=confidence),
            strict=True,
        )
    )
    out["n"] = len(per_cluster)
    if p_value:  # A − B against 0: a swap within a cluster flips the sign of its d̄_e
        out["p"] = randomization_p(per_cluster, np.zeros_like(per_cluster), _sum_difference(len(per_cluster)))
    return out


def differences_by_example(a: pd.DataFrame, b: pd.DataFrame) -> pd.Series:
    """a − b per example on the examples both scored (`per_example` frames, indexed by example id),
    indexed by example id."""
    common = a.index.intersection(b.index)
    return a.loc[common, "score"] - b.loc[common, "score"]


def score_differences(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    """`differences_by_example` as an array (what the bootstrap and `examples_needed` take)."""
    return differences_by_example(a, b).to_numpy(dtype=float)


def examples_needed(
    diffs: np.ndarray,
    margin: float,
    diff: float = 0.0,
    confidence: float = CONFIDENCE,
    power: float = 0.8,
) -> float:
    """The paired examples a non-inferiority test would need to show A ≥ reference − margin with
    probability `power`, where the true difference is `diff`, at the spread of the per-example
    differences `diffs` (normal approximation, s their sample standard deviation):

        n = ((z_c + z_p)·s / (diff + margin))²,   z_c, z_p the normal quantiles of `confidence`
                                                  (one-sided) and `power`: 1.645 and 0.842

    `diffs` are per-example differences as `paired` pairs them: each the difference of the example's
    means over its seeds, so n counts examples decoded with as many seeds (more seeds per example
    shrink s). Inf where diff ≤ −margin (no n shows it); NaN with fewer than two differences or
    anything not finite. A planning number, for the size of the next run: the test itself is
    `non_inferior`'s bootstrap."""
    diffs = np.asarray(diffs, dtype=float)
    if diffs.size < 2 or not (np.isfinite(diffs).all() and math.isfinite(diff) and math.isfinite(margin)):
        return math.nan
    if diff + margin <= 0:
        return math.inf
    z = float(norm.ppf(confidence) + norm.ppf(power))
    return float(math.ceil((z * float(np.std(diffs, ddof=1)) / (diff + margin)) ** 2))
