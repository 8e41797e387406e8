"""Which records to show: Pareto fronts, and each knob family's setting at a reference quality.

`pareto_front` keeps the records no other record beats on both axes. A knob family is a method's
main knob, its `Method.family` (the static weight, the lenience, a cascade's α, typical acceptance's ε,
the knob of a method of one's own); its other knobs name the family's group. Its setting is chosen one
of two ways:

- `choose_on` (the tables' rows): on a VALIDATION run, the setting with the most acceptance among
  those non-inferior to autoregressive decoding, quality ≥ AR − δ with δ = `margin` × AR's quality,
  tested paired and one-sided (`compare.non_inferior`); the choice is then reported on the test run of
  the same protocol (`comparison_group`). Test scores never choose. A family without acceptance (an
  autoregressive baseline's truncation, e.g. `autoregressive_typical`'s ε) has none to maximise: its
  best-scoring non-inferior setting is taken (every acceptance missing, the score decides). The same
  rule chooses what a method without a family runs where a validation run has several (`choice_field`:
  DIVERSED's head among those trained on the task, the fine-tuned draft's draft).
- `best_at_quality` (the "oracle" view, labelled so): on the reported run itself, the most acceptance
  among settings whose score is within the AR run's 95 % half-width.

`front_gap` puts one setting against a family's whole front (DIVERSED against the static ensemble over
w: its acceptance against the front's at its quality, its quality against the front's at its
acceptance), paired by example with a bootstrap that redraws the front in every resample.

Seed-averaged rows and intervals come from `compare`; this module neither loads nor writes files
(per-example rows are read through `compare.per_example`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from diversed.analysis.compare import non_inferior, per_example
from diversed.sweep.methods import METHODS, canonical_float


def pareto_front(
    df: pd.DataFrame, x: str, y: str, *, maximize: tuple[bool, bool] = (True, True)
) -> pd.DataFrame:
    """The rows of `df` not dominated in (x, y), sorted by x.

    `maximize` says per axis whether larger is better: `(True, True)` for score vs acceptance
    rate, `(True, False)` for score vs normalized_time. A row is dominated when another is at
    least as good on both axes and strictly better on one; identical points are all kept.
    Rows with a missing x or y are dropped.
    """
    d = df.dropna(subset=[x, y])
    sign = np.where(maximize, 1.0, -1.0)
    pts = d[[x, y]].to_numpy(dtype=float) * sign  # now larger is better on both axes
    ge = (pts[None, :, :] >= pts[:, None, :]).all(-1)  # ge[i, j]: j at least as good as i
    gt = (pts[None, :, :] > pts[:, None, :]).any(-1)
    dominated = (ge & gt).any(1)
    return d[~dominated].sort_values([x, y])


def best_at_quality(df: pd.DataFrame, reference: str = "autoregressive") -> pd.DataFrame:
    """Each knob family's best setting at the quality of the `reference` method: per (pair, task,
    temperature, N, settings group, method and its knobs but the family's), the row with the
    highest acceptance rate among those whose score is at least the reference's score minus the
    half-width of its 95% CI (the reference of the same pair, task, temperature and settings
    group); where none qualifies, the best-scoring row. `at_quality` says which, `n_settings` among
    how many of the family's values it was picked (1: none was chosen). Rows of methods without a
    knob family pass through. (The paper's "best static weight at the quality of
    autoregressive decoding".)"""
    keys = ["pair", "task", "temperature", "settings_group"]
    d = df.copy()
    d["_group"] = d["settings_group"].astype(object).where(d["settings_group"].notna(), "")
    ref = d[d["method"] == reference]
    half = ((ref["score_ci_high"] - ref["score_ci_low"]) / 2).fillna(0.0)
    floor = (ref["score"] - half).groupby([ref[k] for k in keys[:-1]] + [ref["_group"]]).max()
    kept, d["at_quality"] = [], None
    for name, rows in d.groupby("method", sort=False):
        m = METHODS.get(name)
        if m is None or m.family is None:
            kept.append(rows)
            continue
        others = [k for k in m.fields if k != m.family]
        for _, g in rows.groupby(
            keys[:-1] + ["_group", "num_draft_tokens", *others], dropna=False, sort=False
        ):
            r0 = g.iloc[0]
            bar = floor.get((r0["pair"], r0["task"], r0["temperature"], r0["_group"]), np.nan)
            ok = g[g["score"] >= bar - 1e-12] if not np.isnan(bar) else g.iloc[0:0]
            # the most acceptance at quality; where none is at quality, the best score
            order = ["acceptance_rate", "score"] if len(ok) else ["score", "acceptance_rate"]
            pick = (ok if len(ok) else g).sort_values(order).iloc[[-1]].copy()
            pick["at_quality"] = bool(len(ok))
            pick["n_settings"] = g[m.family].nunique()  # 1: nothing was chosen (the only setting run)
            kept.append(pick)
    return pd.concat(kept).drop(columns="_group").reset_index(drop=True) if kept else d.drop(columns="_group")


# The columns that say which family group a knob choice belongs to (besides the method's other knobs).
_CHOICE_KEYS = ["pair", "task", "temperature", "comparison_group", "num_draft_tokens"]


def choice_field(method: str) -> str | None:
    """The knob a table chooses for `method` on validation: its family, or for a method without one whose
    only knob names what it runs (DIVERSED's head, the fine-tuned draft's draft), that knob; None where
    nothing is chosen (autoregressive decoding, lossless SD)."""
    m = METHODS.get(method)
    if m is None:
        return None
    return m.family or (m.fields[0] if len(m.fields) == 1 else None)


def choice_key(r: pd.Series | dict) -> tuple:
    """Which knob choice a row (a record, or a row of `choose_on`) belongs to: `_CHOICE_KEYS`, the
    method and its knobs other than the family's, missing values alike however they are stored."""
    m, chosen = METHODS[r["method"]], choice_field(r["method"])
    cg, n = r.get("comparison_group"), r.get("num_draft_tokens")
    return (
        r["pair"],
        r["task"],
        canonical_float(r["temperature"]),
        "" if cg is None or pd.isna(cg) else cg,
        None if pd.isna(n) else int(n),
        r["method"],
        *(None if pd.isna(r.get(k)) else r.get(k) for k in m.fields if k != chosen),
    )


def choose_on(
    records: pd.DataFrame, margin: float = 0.05, *, reference: str = "autoregressive"
) -> pd.DataFrame:
    """Each knob family's setting chosen on `records` (one split's raw records, every seed, with
    `run_dir` for their per-example rows): per (pair, task, temperature, comparison group, N, method,
    its other knobs) the setting with the most acceptance (Σ accepted / Σ proposed over examples and
    seeds) among those non-inferior to `reference` of the same pair, task, temperature and comparison
    group, with δ = `margin` × the reference's score; where none is, the best-scoring one
    (`non_inferior` False). One row per choice: the group's columns, the method's knobs, the chosen
    knob `value`, `family`, its validation `score`, `acceptance_rate`, `diff` and one-sided `low`
    (paired against the reference), `delta` and `non_inferior`."""
    d = records.copy()
    d["comparison_group"] = d["comparison_group"].astype(object).where(d["comparison_group"].notna(), "")
    ref_keys = ["pair", "task", "temperature", "comparison_group"]
    refs = {
        k: (per_example(g), pd.to_numeric(g["score"]).mean())
        for k, g in d[d["method"] == reference].groupby(ref_keys, sort=False)
    }
    out = []
    for name, rows in d.groupby("method", sort=False):
        m, field = METHODS.get(name), choice_field(name)
        if m is None or field is None:
            continue
        if "head_task" in rows:  # a head is chosen among those trained on the task it is reported on
            rows = rows[rows["head_task"].isna() | (rows["head_task"] == rows["task"])]
        others = [k for k in m.fields if k != field]
        for key, g in rows.groupby(_CHOICE_KEYS + others, dropna=False, sort=False):
            ref_ex, ref_score = refs.get(tuple(g.iloc[0][ref_keys]), (None, np.nan))
            delta = margin * ref_score
            candidates = _candidates(g, field, ref_ex, delta)
            if not candidates:
                continue
            c = pd.DataFrame(candidates)
            ok = c[c["non_inferior"]]
            pick = (
                ok.sort_values(["acceptance_rate", "score"])
                if len(ok)
                else c.sort_values(["score", "acceptance_rate"])
            ).iloc[-1]
            out.append(
                {
                    **dict(zip(_CHOICE_KEYS + others, key, strict=True)),
                    "method": name,
                    "family": field,
                    **pick.to_dict(),
                    "delta": delta,
                    "margin": margin,
                    "reference_score": ref_score,
                }
            )
    return pd.DataFrame(out)


def _candidates(g: pd.DataFrame, field: str, ref_ex: pd.DataFrame | None, delta: float) -> list[dict]:
    """Each value of knob `field` among records `g`: its validation score and acceptance over examples
    and seeds, and its non-inferiority test against the reference's examples `ref_ex` at margin `delta`."""
    candidates = []
    for value, c in g.groupby(field, sort=True):
        ex = per_example(c)
        if ex is None or ref_ex is None:
            continue
        test = non_inferior(ex, ref_ex, delta)
        acc = ex["accepted"].sum() / ex["proposed"].sum() if ex["proposed"].sum() > 0 else np.nan
        candidates.append(
            {
                "value": value,
                "score": ex["score"].mean(),
                "acceptance_rate": acc,
                "diff": test["diff"],
                "low": test["low"],
                "non_inferior": test["holds"],
            }
        )
    return candidates


# ----------------------------------------------------------------------------- a point against a front


def _front_curve(acc: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Pareto front of points (acceptance, quality), both maximised, sorted by acceptance rising:
    quality then falls along it (a point of more acceptance AND more quality would dominate)."""
    order = np.lexsort((-q, acc))  # acceptance rising, the best quality first among equal acceptance
    a, s = acc[order], q[order]
    keep = np.ones(len(a), dtype=bool)
    best = -np.inf
    for i in range(len(a) - 1, -1, -1):  # from the most acceptance down: keep what beats all to its right
        keep[i] = s[i] > best
        best = max(best, s[i])
    return a[keep], s[keep]


def front_quality_at(acc: np.ndarray, q: np.ndarray, at: float) -> float:
    """The front's quality at acceptance `at`, linearly interpolated between its neighbouring points
    (mixing two settings at random reaches any point of the segment): the best quality the family reaches
    with at least that acceptance. Below the front's least acceptance, its best quality; above its most,
    NaN (no setting accepts that much)."""
    a, s = _front_curve(acc, q)
    if not len(a) or at > a[-1] + 1e-12:
        return np.nan
    return float(np.interp(at, a, s))  # np.interp holds the end values beyond the ends: s[0] below a[0]


def front_acceptance_at(acc: np.ndarray, q: np.ndarray, at: float) -> float:
    """The front's acceptance at quality `at`: the most acceptance with at least that quality, linearly
    interpolated along the front. Below the front's least quality, its most acceptance; above its best,
    NaN (no setting scores that well)."""
    a, s = _front_curve(acc, q)
    if not len(a) or at > s[0] + 1e-12:
        return np.nan
    return float(np.interp(at, s[::-1], a[::-1]))  # quality falls as acceptance rises: reverse for interp


def front_gap(
    front: Sequence[pd.DataFrame],
    point: pd.DataFrame,
    *,
    confidence: float = 0.95,
    n_resamples: int = 4999,
    seed: int = 0,
) -> dict[str, float]:
    """A setting against a family's front (e.g. DIVERSED against the static ensemble over w), paired by
    example: `front` holds the family's settings and `point` the setting, each as `compare.per_example`
    rows (score, accepted, proposed per example, seeds summed), on the examples all of them scored.

        Δ acceptance = acc(point) − acc_front(quality(point))   the front's acceptance at the point's quality
        Δ quality    = q(point)   − q_front(acceptance(point))   the front's quality at the point's acceptance

    with acc = Σ accepted / Σ proposed, q = mean score, and the front interpolated linearly between its
    settings (`front_acceptance_at`, `front_quality_at`). Both are > 0 where the point lies above the
    front. Intervals: percentile bootstrap over examples, the SAME resampled examples for the point and
    every setting of the front (so the front is re-drawn in each resample, its noise included: a front
    of noisy maxima leans upward, against the point). A resample where the point lies beyond the front's
    range (better quality than any setting, more acceptance than any) has no gap: `undefined_*` counts the
    share of them; the interval is over the others. Returns {d_acceptance, d_acceptance_low/high,
    d_quality, d_quality_low/high, undefined_acceptance, undefined_quality, n}."""
    common = point.index
    for f in front:
        common = common.intersection(f.index)
    nan = dict.fromkeys(
        (
            "d_acceptance",
            "d_acceptance_low",
            "d_acceptance_high",
            "d_quality",
            "d_quality_low",
            "d_quality_high",
        ),
        np.nan,
    )
    frames = [point.loc[common], *(f.loc[common] for f in front)]
    if (
        len(common) < 2
        or not front
        or any(f[c].isna().any() for f in frames for c in ("accepted", "proposed"))
    ):
        return nan | {"undefined_acceptance": np.nan, "undefined_quality": np.nan, "n": len(common)}
    S = np.stack([f["score"].to_numpy(float) for f in frames])  # (1 + k settings, examples)
    A = np.stack([f["accepted"].to_numpy(float) for f in frames])
    P = np.stack([f["proposed"].to_numpy(float) for f in frames])

    def gaps(q: np.ndarray, acc: np.ndarray) -> tuple[float, float]:
        return (
            acc[0] - front_acceptance_at(acc[1:], q[1:], q[0]),
            q[0] - front_quality_at(acc[1:], q[1:], acc[0]),
        )

    n = len(common)
    est = gaps(S.mean(1), A.sum(1) / P.sum(1))
    # every resample at once: how often each example is drawn (resamples x examples), then per setting
    # the resampled means and ratios as matrix products; only the front's interpolation loops
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    q_all, acc_all = counts @ S.T / n, (counts @ A.T) / (counts @ P.T)
    draws = np.array([gaps(q, a) for q, a in zip(q_all, acc_all, strict=True)])
    out = {"n": n}
    tail = (1 - confidence) / 2
    for j, name in enumerate(("d_acceptance", "d_quality")):
        ok = draws[:, j][np.isfinite(draws[:, j])]
        out[f"undefined_{name[2:]}"] = 1 - len(ok) / n_resamples
        low, high = np.quantile(ok, [tail, 1 - tail]) if len(ok) else (np.nan, np.nan)
        out |= {name: float(est[j]), f"{name}_low": float(low), f"{name}_high": float(high)}
    return out
