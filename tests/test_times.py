"""Times and their uncertainty: one normalisation paired by seed, intervals over repeats and over
seeds, a batch-1 method against autoregressive decoding at batch 1, records from before."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from diversed.sweep.intervals import log_interval, median_interval
from diversed.sweep.results import ResultStore, load_results
from diversed.sweep.times import (
    NORMALIZED,
    TIME_FIELDS,
    Baselines,
    baseline_key,
    ci_fields,
    estimate_seconds,
    example_interval,
    example_log_ratios,
    measured,
    normalized,
    shown_time,
    time_over_seeds,
    times_over_seeds,
)


def rec(
    method: str,
    seed: int,
    runs: list[float],
    *,
    new_tokens: int = 100,
    lat: list[float] | None = None,
    **extra,
) -> dict:
    """A record as evaluate writes it before normalising: the measurements and `measured`."""
    fields = {
        "pair": "p",
        "task": "t",
        "metric": "accuracy",
        "method": method,
        "temperature": 1.0,
        "seed": seed,
        "n_examples": 4,
        "score": 0.5,
        "settings_group": "g",
        "settings": f"s{seed}{method}",
        "new_tokens": new_tokens,
        "wall_time_runs": runs,
        "wall_time_s": float(np.median(runs)),
        "timing": {"batch_size": 16},
    }
    if method != "autoregressive":
        fields["num_draft_tokens"] = 3
    if method == "hf_static":
        fields["weight"] = 0.5
    if lat is not None:
        fields |= {
            "latency_runs": lat,
            "latency_s": float(np.median(lat)),
            "latency_examples": 4,
            "latency_new_tokens": 90,
        }
    fields |= extra
    return fields | measured(fields)


def evaluate_like(records: list[dict]) -> list[dict]:
    """What evaluate does: each record normalised by the autoregressive record of its baseline_key."""
    base = Baselines(records)
    return [r | base.normalized(r) for r in records]


def write(run_dir, records: list[dict]) -> None:
    store = ResultStore(run_dir)
    for r in records:
        store.write(r, [])


# ----------------------------------------------------------------------------- one normalisation


def test_baselines_pair_a_record_with_its_own_autoregressive_record_and_one_time_is_shown():
    ar0, ar1, lossless = (
        rec("autoregressive", 0, [10.0, 10.0]),
        rec("autoregressive", 1, [20.0, 20.0]),
        rec("lossless", 1, [5.0, 5.0]),
    )
    base = Baselines([lossless, ar0])  # (what evaluate finds on resuming; the others it adds as they finish)
    assert base.of(lossless) is None and base.normalized(lossless)["normalized_time"] is None
    base.add(ar1)
    assert base.of(lossless) is ar1 and base.normalized(lossless) == normalized(lossless, ar1)
    assert base.normalized(lossless)["normalized_time"] == pytest.approx(0.25)
    assert baseline_key(ar1) in base.by_key and baseline_key(lossless) == baseline_key(ar1)
    # tables and figures show the paper's time (batch 1) where there is one
    latency = {**lossless, "normalized_latency": 0.3}
    assert shown_time(lossless) == shown_time(pd.DataFrame([lossless])) == "normalized_time"
    assert (
        shown_time(latency)
        == shown_time(pd.Series(latency))
        == shown_time(pd.DataFrame([lossless, latency]))
        == "normalized_latency"
    )
    assert shown_time({"normalized_latency": float("nan")}) == "normalized_time"


def test_each_seed_is_divided_by_its_own_seeds_autoregressive_time(tmp_path):
    records = evaluate_like(
        [
            rec("autoregressive", 0, [10.0, 10.5, 9.5]),
            rec("autoregressive", 1, [20.0, 21.0, 19.0]),
            rec("lossless", 0, [5.0, 5.2, 4.8], new_tokens=50),
            rec("lossless", 1, [5.0, 5.1, 4.9]),
        ]
    )
    by = {(r["method"], r["seed"]): r for r in records}
    assert by["lossless", 0]["normalized_time"] == pytest.approx(0.5)  # not 5 / mean(10, 20)
    assert by["lossless", 1]["normalized_time"] == pytest.approx(0.25)
    assert by["lossless", 0]["normalized_time_per_token_s"] == pytest.approx(1.0)  # half the tokens
    assert by["lossless", 0]["normalized_time_batch_size"] == 16
    assert by["autoregressive", 1]["normalized_time"] == 1.0
    assert (
        by["autoregressive", 1]["normalized_time_ci_low"]
        == by["autoregressive", 1]["normalized_time_ci_high"]
        == 1.0
    )

    # load_results reads the same numbers, and fills records written without them by the same rule
    write(tmp_path / "new", records)
    dropped = [{k: v for k, v in r.items() if k not in (*NORMALIZED, *TIME_FIELDS)} for r in records]
    write(tmp_path / "old", dropped)
    new, old = load_results(tmp_path / "new"), load_results(tmp_path / "old")
    assert old["normalized_time"].isna().sum() == 0
    pd.testing.assert_frame_equal(old[list(TIME_FIELDS)], new[list(TIME_FIELDS)])
    pd.testing.assert_frame_equal(old[list(NORMALIZED)], new[list(NORMALIZED)])
    assert new.set_index(["method", "seed"]).loc[("lossless", 1), "normalized_time"] == pytest.approx(0.25)


def test_the_baseline_is_the_same_settings_and_seed():
    r = rec("lossless", 0, [1.0])
    assert baseline_key(r) == baseline_key(rec("autoregressive", 0, [2.0]))
    for change in (
        {"seed": 1},
        {"settings_group": "h"},
        {"temperature": 0.1},
        {"n_examples": 5},
        {"task": "u"},
    ):
        assert baseline_key(r | change) != baseline_key(r), change
    assert baseline_key(r | {"temperature": 1.0000000001, "seed": np.int64(0)}) == baseline_key(r)
    assert normalized(r, None)["normalized_time"] is None


# ----------------------------------------------------------------------------- intervals


def test_the_interval_holds_the_median_and_widens_with_spread():
    rng = np.random.default_rng(1)
    tight, wide = 1 + 0.01 * rng.standard_normal(7), 1 + 0.2 * rng.standard_normal(7)
    for runs in (tight, wide):
        low, high = median_interval(runs)
        assert low <= np.median(runs) <= high
    assert np.subtract(*median_interval(wide)[::-1]) > 5 * np.subtract(*median_interval(tight)[::-1])
    assert median_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert all(math.isnan(v) for v in median_interval([1.0])) and all(
        math.isnan(v) for v in median_interval([1.0, 2.0], [3.0])
    )
    # a ratio's interval holds the ratio of the medians, and the same runs give the same interval
    a, b = [5.0, 5.5, 4.6, 5.2, 4.9], [10.0, 9.0, 11.5, 10.2, 9.8]
    low, high = median_interval(a, b, scale=2.0)
    assert low < 2 * np.median(a) / np.median(b) < high and (low, high) == median_interval(a, b, scale=2.0)


def test_records_carry_their_intervals(tmp_path):
    records = evaluate_like(
        [
            rec("autoregressive", 0, [10.0, 11.0, 9.0, 10.4, 9.9], lat=[1.0, 1.1, 0.9]),
            rec("lossless", 0, [5.0, 6.0, 4.0, 5.3, 5.1], lat=[0.5, 0.6, 0.4]),
        ]
    )
    r = records[1]
    assert (r["wall_time_ci_low"], r["wall_time_ci_high"]) == median_interval([5.0, 6.0, 4.0, 5.3, 5.1])
    assert r["wall_time_ci_low"] <= r["wall_time_s"] <= r["wall_time_ci_high"]
    for name in NORMALIZED:
        if name == "normalized_decode_per_token":  # needs times to the first token: these have none
            assert r[name] is None
            continue
        low, high = ci_fields(name)
        assert r[low] < r[name] < r[high], name
    assert r["latency_per_token_s"] == pytest.approx(0.5 * 4 / 90)
    assert r["normalized_latency_per_token"] == pytest.approx(r["normalized_latency"])  # both 90 tokens alone


# ----------------------------------------------------------------------------- a method decoded at batch 1


def test_hf_static_is_normalised_by_autoregressive_decoding_at_batch_1(caplog):
    ar = rec(
        "autoregressive", 0, [1.0, 1.1, 0.9], lat=[0.5, 0.55, 0.45]
    )  # 4 examples at batch 16: 1 s; alone: 0.5 s each
    hf = rec("hf_static", 0, [4.0, 4.4, 3.6], new_tokens=60)  # 4 examples, one at a time
    r = normalized(hf, ar)
    assert r["normalized_time"] == pytest.approx((4.0 / 4) / 0.5) and r["normalized_time_batch_size"] == 1
    assert r["normalized_time_ci_low"] < 2.0 < r["normalized_time_ci_high"]
    assert r["normalized_time_per_token_s"] == pytest.approx((4.0 / 60) / (0.5 * 4 / 90))
    # without autoregressive latency over the same examples: nothing, and a warning that says what to set
    for baseline in (rec("autoregressive", 0, [1.0]), {**ar, "latency_examples": 2}):
        with caplog.at_level("WARNING"):
            assert normalized(hf, baseline)["normalized_time"] is None
        assert "timing.latency=true" in caplog.text


def test_an_old_hf_static_record_normalised_at_the_sweeps_batch_is_redone(tmp_path):
    ar = rec("autoregressive", 0, [1.0, 1.1, 0.9], lat=[0.5, 0.55, 0.45])
    hf = rec("hf_static", 0, [4.0, 4.4, 3.6], normalized_time=4.0)  # as evaluate wrote it before: 4 / 1
    write(tmp_path, [ar, hf])
    df = load_results(tmp_path).set_index("method")
    assert df.loc["hf_static", "normalized_time"] == pytest.approx(2.0)
    assert df.loc["hf_static", "normalized_time_batch_size"] == 1


# ----------------------------------------------------------------------------- over seeds


def test_time_over_seeds():
    one = [{"seed": 0, "normalized_time": 0.8, "normalized_time_ci_low": 0.7, "normalized_time_ci_high": 0.9}]
    assert time_over_seeds(one) == (0.8, 0.7, 0.9, 1)  # one seed: its repeats' interval
    three = [
        {
            "seed": s,
            "normalized_time": v,
            "normalized_time_ci_low": v - 0.01,
            "normalized_time_ci_high": v + 0.01,
        }
        for s, v in enumerate((0.7, 0.8, 1.0))
    ]
    mean, low, high, n = time_over_seeds(three)
    # the geometric mean, and the t-interval of the log ratios exponentiated
    logs = np.log([0.7, 0.8, 1.0])
    expected = np.exp(stats.t.interval(0.95, 2, loc=logs.mean(), scale=stats.sem(logs)))
    assert (mean, n) == (pytest.approx(np.exp(logs.mean())), 3) and (low, high) == pytest.approx(expected)
    assert high - low > 0.1  # the seeds' spread, not the repeats'
    assert time_over_seeds([{"seed": 0, "normalized_time": None}])[3] == 0
    with pytest.raises(ValueError, match="one per seed"):
        time_over_seeds(three + three[:1])
    d = pd.DataFrame([{**r, "method": "static", "weight": w} for w in (0.5, 1.0) for r in three])
    t = times_over_seeds(d, ["method", "weight"])
    assert len(t) == 2 and t["normalized_time_ci_low"].tolist() == pytest.approx([expected[0]] * 2)


def test_a_ratio_interval_over_seeds_is_positive_and_holds_the_geometric_mean():
    """Three per-seed ratios that gave "1.19 [-0.18, 2.55]" on the linear scale (t = 4.30): on the log
    scale the interval is positive, asymmetric, and holds the geometric mean."""
    x = [0.62, 1.29, 1.66]
    linear = stats.t.interval(0.95, 2, loc=np.mean(x), scale=stats.sem(x))
    assert linear[0] < 0  # what the report printed before
    g, low, high = log_interval(x)
    assert g == pytest.approx(np.exp(np.mean(np.log(x))))
    assert 0 < low < g < high and high / g == pytest.approx(g / low)  # symmetric on the log scale
    assert log_interval([1.2])[0] == 1.2 and math.isnan(log_interval([1.2])[1])
    assert log_interval([0.9, 0.9]) == (pytest.approx(0.9), pytest.approx(0.9), pytest.approx(0.9))
    rng = np.random.default_rng(0)
    for _ in range(50):  # any few ratios: positive bounds around the geometric mean
        g, low, high = log_interval(np.exp(rng.normal(0, 1.5, rng.integers(2, 6))))
        assert 0 < low <= g <= high


def _timed(method: str, seed: int, seconds: list[float], tokens: list[int], scores=None) -> dict:
    """A record with per-example latencies (as `time_point` writes them) and its normalised latency."""
    return {
        "pair": "p",
        "task": "t",
        "temperature": 1.0,
        "n_examples": len(seconds),
        "settings_group": "g",
        "seed": seed,
        "method": method,
        "normalized_latency": 1.0,
        "normalized_latency_per_token": 1.0,
        "latency_example_ids": [f"e{i}" for i in range(len(seconds))],
        "latency_example_s": seconds,
        "latency_example_tokens": tokens,
        "latency_example_scores": scores if scores is not None else [1.0] * len(seconds),
    }


def test_per_example_times_give_a_cluster_interval_on_log_ratios_paired_by_seed_and_example():
    rng = np.random.default_rng(1)
    n, records, truth = 40, [], []
    for seed in (0, 1, 2):
        ar = list(rng.uniform(0.5, 2.0, n))
        tokens = list(rng.integers(5, 30, n))
        ratio = np.exp(rng.normal(np.log(0.6), 0.2, n))  # about 0.6× per example
        truth.append(np.log(ratio))
        records += [
            _timed("autoregressive", seed, ar, tokens),
            _timed("lossless", seed, list(np.array(ar) * ratio), [2 * t for t in tokens], [0.0] * n),
        ]
    df = pd.DataFrame(records)
    base = Baselines(records)
    logs = [example_log_ratios(r, base.of(r)) for r in records if r["method"] == "lossless"]
    assert np.allclose(np.concatenate([x.to_numpy() for x in logs]), np.concatenate(truth))
    g, low, high, k = time_over_seeds(df[df["method"] == "lossless"], "normalized_latency", baselines=base)
    assert k == 3 and g == pytest.approx(np.exp(np.mean(np.mean(truth, axis=0))))
    assert 0 < low < g < high and 0.5 < low and high < 0.7
    assert (g, low, high) == example_interval(logs)
    # per token: twice the tokens in the same time ratio, so half of it
    g_tok = time_over_seeds(df[df["method"] == "lossless"], "normalized_latency_per_token", baselines=base)[0]
    assert g_tok == pytest.approx(g / 2)
    # autoregressive decoding against itself: exactly 1
    assert time_over_seeds(df[df["method"] == "autoregressive"], "normalized_latency", baselines=base)[
        :3
    ] == (
        1.0,
        1.0,
        1.0,
    )
    # times_over_seeds finds the baselines among the records, and the timed samples' mean score
    t = times_over_seeds(df, ["method"]).set_index("method")
    assert t.loc["lossless", "normalized_latency"] == pytest.approx(g)
    assert t.loc["lossless", "timed_score"] == 0.0 and t.loc["autoregressive", "timed_score"] == 1.0
    # a record without per-example times: back to the per-seed values
    old = df.drop(columns=["latency_example_s"])
    assert time_over_seeds(old[old["method"] == "lossless"], "normalized_latency", baselines=base)[0] == 1.0


def test_the_default_and_the_demo_time_with_repeats():
    from hydra import compose, initialize_config_dir

    from diversed import CONFIG_DIR
    from diversed.sweep.settings import TimingSettings

    assert TimingSettings().repeats >= 5 and TimingSettings().latency_repeats >= 3
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        default = compose("evaluate")
    assert default.timing.repeats >= 5 and default.timing.latency_repeats >= 3  # the presets: test_presets.py
    demo = (Path(__file__).resolve().parents[1] / "scripts" / "demo.py").read_text()
    # the validation sweep and --quick are not timed (repeats 0); the full test sweep, whose times the
    # report shows, is
    assert (
        max(int(r) for r in re.findall(r"timing\.repeats=(\d+)", demo)) >= 5
        and int(re.search(r"timing\.latency_repeats=(\d+)", demo)[1]) >= 3
    )


def test_a_dry_runs_estimate_rests_on_finished_points_of_the_same_kind():
    finished = [
        {
            "method": "lossless",
            "num_draft_tokens": 3,
            "temperature": 0.0,
            "n_examples": 10,
            "wall_time_s": 2.0,
        },
        {
            "method": "lossless",
            "num_draft_tokens": 5,
            "temperature": 0.0,
            "n_examples": 10,
            "wall_time_s": 4.0,
            "latency_s": 0.5,
        },
        {"method": "static", "num_draft_tokens": 3, "temperature": 1.0, "n_examples": 20, "wall_time_s": 8.0},
    ]
    timing = {"warmup": 1, "repeats": 2, "latency": False}
    lossless3 = {"method": "lossless", "num_draft_tokens": 3, "temperature": 0.0}
    # 0.2 s per example, 20 examples: 1 scored + 2 timed passes of 20, 1 warm-up pass over a batch of 4
    seconds, basis = estimate_seconds([lossless3], finished, n_examples=20, timing=timing, batch_size=4)
    assert seconds == pytest.approx(0.2 * (3 * 20 + 4))
    assert (
        basis.startswith("from 3 finished points in this run")
        and "of the same method, N and T (1 point);" in basis
    )
    # no record of its N: its method's median (0.2, 0.4 -> 0.3); no record of its method: every point's (0.4)
    other = [
        {**lossless3, "num_draft_tokens": 7},
        {"method": "typical", "num_draft_tokens": 3, "temperature": 0.0},
    ]
    seconds, basis = estimate_seconds(other, finished, n_examples=20, timing=timing, batch_size=4)
    assert seconds == pytest.approx((0.3 + 0.4) * 64)
    assert "of the same method (1 point), every finished point (1 point);" in basis
    # latency passes: 3 repeats over 5 examples alone plus 1 warm-up, at the 0.5 s per sample lossless
    # N=5 took
    latency = {**timing, "latency": True, "latency_repeats": 3, "latency_examples": 5}
    seconds, _ = estimate_seconds([lossless3], finished, n_examples=20, timing=latency, batch_size=4)
    assert seconds == pytest.approx(0.2 * 64 + 0.5 * (3 * 5 + 1))
    # nothing finished: no number
    seconds, basis = estimate_seconds([lossless3], [], n_examples=20, timing=timing, batch_size=4)
    assert seconds is None and "no finished points" in basis and "task.n_examples=8" in basis


def test_decode_only_ratios_take_the_time_to_the_first_token_out():
    from diversed.sweep.times import example_log_ratios

    ar = {
        "latency_example_ids": ["a", "b", "c"],
        "latency_example_s": [1.0, 2.0, 1.0],
        "latency_example_tokens": [11, 21, 1],
        "latency_example_first_s": [0.5, 1.0, 1.0],
    }
    sd = {**ar, "latency_example_s": [0.75, 1.5, 0.9], "latency_example_first_s": [0.5, 1.0, 0.9]}
    r = example_log_ratios(sd, ar, "decode")
    # a: (0.25 / 10) / (0.5 / 10) = 0.5, b the same; c made one token: no decode-only time to compare
    assert list(r.index) == ["a", "b"] and np.allclose(np.exp(r.to_numpy()), 0.5)
    # end to end per token the prompt's reading is in: 0.75 and 0.9 of AR's time
    assert np.allclose(np.exp(example_log_ratios(sd, ar, True).to_numpy()), [0.75, 0.75, 0.9])
    assert example_log_ratios({**sd, "latency_example_first_s": None}, ar, "decode") is None
