"""A setting against a family's front (`fronts.front_gap`): the front's interpolation, and the paired
bootstrap's verdicts on points placed above, on and below it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from diversed.analysis.fronts import front_acceptance_at, front_gap, front_quality_at

# (acceptance, quality): three settings on the front and one it dominates
ACC = np.array([0.5, 0.7, 1.0, 0.6])
Q = np.array([0.9, 0.8, 0.2, 0.7])


def test_the_front_is_interpolated_between_its_settings_and_ignores_dominated_ones():
    assert front_quality_at(ACC, Q, 0.6) == pytest.approx(0.85)  # between (0.5, 0.9) and (0.7, 0.8)
    assert front_acceptance_at(ACC, Q, 0.85) == pytest.approx(0.6)
    assert front_acceptance_at(ACC, Q, 0.5) == pytest.approx(0.7 + 0.3 * (0.8 - 0.5) / 0.6)
    assert front_quality_at(ACC, Q, 0.4) == pytest.approx(0.9)  # less acceptance than any: its best quality
    assert front_acceptance_at(ACC, Q, 0.1) == pytest.approx(1.0)  # worse than any: its most acceptance
    assert np.isnan(front_acceptance_at(ACC, Q, 0.95))  # better than every setting: no gap
    assert np.isnan(front_quality_at(ACC[:3] * 0.9, Q[:3], 0.95))  # more acceptance than any


def _rows(rng, n, p_score, p_accept, proposed=10):
    """Per-example rows as `compare.per_example` gives them: 0/1 scores, accepted of `proposed` drafts."""
    return pd.DataFrame(
        {
            "score": (rng.random(n) < p_score).astype(float),
            "accepted": rng.binomial(proposed, p_accept, n).astype(float),
            "proposed": np.full(n, float(proposed)),
        },
        index=[f"e{i}" for i in range(n)],
    )


def _front(rng, n):
    # the static ensemble over w: less acceptance, more quality as w rises
    return [_rows(rng, n, q, a) for q, a in ((0.9, 0.5), (0.75, 0.7), (0.4, 0.95))]


def test_a_point_above_the_front_is_found_above_and_one_below_below():
    rng = np.random.default_rng(1)
    n = 400
    front = _front(rng, n)
    above = front_gap(front, _rows(rng, n, 0.9, 0.8), n_resamples=999)
    assert above["n"] == n
    assert above["d_acceptance"] > 0.15 and above["d_acceptance_low"] > 0  # ~0.8 against ~0.5 at q 0.9
    assert above["d_quality"] > 0.05 and above["d_quality_low"] > 0
    below = front_gap(front, _rows(rng, n, 0.5, 0.6), n_resamples=999)
    assert below["d_acceptance_high"] < 0 and below["d_quality_high"] < 0
    assert below["d_acceptance_low"] <= below["d_acceptance"] <= below["d_acceptance_high"]


def test_a_setting_of_the_front_itself_lies_on_it():
    rng = np.random.default_rng(2)
    front = _front(rng, 200)
    on = front_gap(front, front[1], n_resamples=999)
    assert on["d_acceptance"] == pytest.approx(0.0, abs=1e-12)
    assert on["d_quality"] == pytest.approx(0.0, abs=1e-12)
    assert on["d_acceptance_low"] <= 0 <= on["d_acceptance_high"]


def test_pairs_by_example_and_refuses_rows_without_counts():
    rng = np.random.default_rng(3)
    front = _front(rng, 50)
    point = _rows(rng, 50, 0.8, 0.6).iloc[10:]  # scored fewer examples: the common ones are compared
    assert front_gap(front, point, n_resamples=99)["n"] == 40
    point = point.assign(proposed=np.nan)
    assert np.isnan(front_gap(front, point, n_resamples=99)["d_acceptance"])


def test_beyond_the_front_is_undefined_not_extrapolated():
    rng = np.random.default_rng(4)
    front = _front(rng, 300)
    best = _rows(rng, 300, 1.0, 0.99)  # every answer right: more quality than any static setting
    g = front_gap(front, best, n_resamples=499)
    assert np.isnan(g["d_acceptance"]) and g["undefined_acceptance"] > 0.95
    assert np.isnan(g["d_quality"])  # and more acceptance than any
