"""Which records to show: one row per setting, Pareto fronts, each family's best at a reference quality.

`mean_over_seeds` averages the records of one setting over seeds; `pareto_front` keeps the
records no other record beats on both axes; `best_at_quality` keeps, per knob family (the static weight, the lenience, a cascade's α...), the setting with the most
acceptance among those at the quality of autoregressive decoding. The plots and the report read
results through these; it neither loads nor writes files.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# What identifies one setting across seeds, and the values averaged over seeds (`mean_over_seeds`).
SETTING_FIELDS = ("pair", "task", "metric", "method", "weight", "head", "head_task", "lenience", "cascade_rule",
                  "cascade_alpha", "typical_epsilon", "typical_delta", "draft_model", "num_draft_tokens",
                  "temperature", "n_examples", "settings_group")  # fmt: skip
VALUE_FIELDS = ("score", "score_ci_low", "score_ci_high", "acceptance_rate", "alpha", "mean_tv", "normalized_time",
                "normalized_latency", "latency_s", "wall_time_s", "mean_w")  # fmt: skip


def mean_over_seeds(df: pd.DataFrame) -> pd.DataFrame:
    """One row per setting (`SETTING_FIELDS`, settings apart from the seed never averaged together):
    the mean of each of `VALUE_FIELDS` over seeds, and `n_seeds`."""
    cols = [c for c in SETTING_FIELDS if c in df]
    values = [c for c in VALUE_FIELDS if c in df]
    d = df[cols + values].copy()
    d[values] = d[values].astype(float)
    groups = d.groupby(cols, dropna=False, sort=False)
    return groups.mean().join(groups.size().rename("n_seeds")).reset_index()


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
    group); where none qualifies, the best-scoring row. `at_quality` says which. Rows of methods
    without a knob family pass through. (The paper's "best static weight at the quality of
    autoregressive decoding".)"""
    from diversed.methods import METHODS

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
        others = [k for k in m.knobs if k != m.family]
        for _, g in rows.groupby(keys[:-1] + ["_group", "num_draft_tokens", *others], dropna=False, sort=False):
            r0 = g.iloc[0]
            bar = floor.get((r0["pair"], r0["task"], r0["temperature"], r0["_group"]), np.nan)
            ok = g[g["score"] >= bar - 1e-12] if not np.isnan(bar) else g.iloc[0:0]
            # the most acceptance at quality; where none is at quality, the best score
            order = ["acceptance_rate", "score"] if len(ok) else ["score", "acceptance_rate"]
            pick = (ok if len(ok) else g).sort_values(order).iloc[[-1]].copy()
            pick["at_quality"] = bool(len(ok))
            kept.append(pick)
    return pd.concat(kept).drop(columns="_group").reset_index(drop=True) if kept else d.drop(columns="_group")
