"""Claims: intervals over examples and seeds, paired differences, non-inferiority, and knob choices made
on the validation split only; records with per-example rows written here (numbers known)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from diversed.analysis.compare import (
    _sum_difference,
    _sum_ratio_difference,
    cell_intervals,
    examples_needed,
    holm,
    holm_verdict,
    mean_over_seeds,
    non_inferior,
    paired,
    per_example,
    pooled_difference,
    randomization_p,
    verdict,
)
from diversed.analysis.fronts import choose_on
from diversed.report import load_runs, write_report
from diversed.sweep.intervals import binary_interval, bootstrap_interval, mean_interval, t_interval, wilson
from diversed.sweep.results import ResultStore, run_record

N = 60


def _write(store, *, method, split, seed, scores, accepted=None, proposed=None, **knobs):
    n_draft = None if method == "autoregressive" else 3
    record = run_record(
        pair="p",
        task="t",
        metric="accuracy",
        method=method,
        num_draft_tokens=n_draft,
        temperature=1.0,
        seed=seed,
        n_examples=len(scores),
        score=float(np.mean(scores)),
        split=split,
        settings=f"s-{split}-{seed}",
        settings_group=f"g-{split}",
        comparison_group="c",
        acceptance_rate=None if accepted is None else float(np.sum(accepted) / np.sum(proposed)),
        wall_time_s=1.0,
        **knobs,
    )
    rows = [
        {
            "example_id": f"e{i}",
            "completion": "",
            "score": float(s),
            "new_tokens": 4,
            "accepted_drafts": None if accepted is None else int(accepted[i]),
            "proposed_drafts": None if proposed is None else int(proposed[i]),
            "verified_drafts": None if proposed is None else int(min(proposed[i], accepted[i] + 1)),
        }
        for i, s in enumerate(scores)
    ]
    store.write(record, rows)


def test_bootstrap_intervals_behave():
    rng = np.random.default_rng(1)
    x = rng.normal(0.3, 1.0, 400)
    est, low, high = bootstrap_interval(lambda a, axis=-1: a.mean(axis), [x])
    assert low < est < high and low < 0.3 < high and high - low == pytest.approx(2 * 1.96 / 20, rel=0.2)
    assert bootstrap_interval(lambda a, axis=-1: a.mean(axis), [np.zeros(50)]) == (0.0, 0.0, 0.0)
    assert (
        verdict(0.01, 0.2) == "better"
        and verdict(-0.2, -0.01) == "worse"
        and verdict(-0.1, 0.1) == "no difference shown"
    )
    # one-sided: the other bound is open
    _, low1, high1 = bootstrap_interval(lambda a, axis=-1: a.mean(axis), [x], alternative="greater")
    assert high1 == np.inf and low < low1 < est


def test_mean_interval_of_0_1_scores_is_wilson_and_stays_in_range():
    # 3 of 10 right: Wilson's 95 % interval is [0.1078, 0.6032] (p = 0.3, z = 1.96), as scipy computes it
    m, low, high = mean_interval([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    assert m == pytest.approx(0.3) and (low, high) == (
        pytest.approx(0.1078, abs=1e-4),
        pytest.approx(0.6032, abs=1e-4),
    )
    ci = stats.binomtest(3, 10).proportion_ci(0.95, method="wilson")
    assert (low, high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    # every wrong (or every right): a width all the same, inside [0, 1] (a t-interval had none)
    m, low, high = mean_interval([0.0] * 20)
    assert m == low == 0.0 and 0.15 < high < 0.17
    m, low, high = mean_interval([1.0] * 20)
    assert m == high == 1.0 and 0.83 < low < 0.85
    # near the bounds a t-interval crossed them (1 of 5: 0.2 ± 0.555); these never do
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 8, 20, 100):
        for p in (0.0, 0.05, 0.3, 0.95, 1.0):
            x = (rng.random(n) < p).astype(float)
            m, low, high = mean_interval(x)
            assert 0.0 <= low <= m <= high <= 1.0 and high > low, (n, p, x)
    # other bounds: the same interval, rescaled
    assert mean_interval([-1.0, 1.0, 1.0, 1.0], bounds=(-1.0, 1.0))[1:] == pytest.approx(
        [2 * v - 1 for v in mean_interval([0.0, 1.0, 1.0, 1.0])[1:]]
    )


def test_a_report_cell_of_all_wrong_or_all_right_examples_has_a_width():
    """The cluster bootstrap has nothing to resample when every example scores 0 (or 1): Wilson's interval
    over the examples instead of a zero-width one; a cell whose scores vary keeps the bootstrap."""
    rows = lambda scores: pd.DataFrame({"score": scores, "accepted": 1.0, "proposed": 2.0, "verified": 2.0})  # noqa: E731
    cell = cell_intervals(rows([0.0] * 20))
    assert cell["score"] == cell["score_ci_low"] == 0.0 and 0.15 < cell["score_ci_high"] < 0.17
    cell = cell_intervals(rows([1.0] * 20))
    assert cell["score"] == cell["score_ci_high"] == 1.0 and 0.83 < cell["score_ci_low"] < 0.85
    varied = [0.0, 1 / 3, 1.0, 2 / 3] * 5
    assert (
        cell_intervals(rows(varied))["score_ci_low"]
        == bootstrap_interval(lambda x, axis: x.mean(axis), [varied])[1]
    )


def test_one_right_of_24_is_wilsons_interval_in_a_record_and_in_a_cell():
    """GSM8K, 1 of 24 right, one seed: Wilson's [0.74 %, 20.2 %], not the bootstrap's [0, 20.83]."""
    scores = [1.0] + [0.0] * 23
    m, low, high = mean_interval(scores)
    assert m == pytest.approx(1 / 24) and (low, high) == (
        pytest.approx(0.0074, abs=1e-4),
        pytest.approx(0.2024, abs=1e-4),
    )
    ex = pd.DataFrame(
        {"score": scores, "runs": 1, "binary": True, "accepted": 1.0, "proposed": 2.0, "verified": 2.0}
    )
    cell = cell_intervals(ex)
    assert (cell["score_ci_low"], cell["score_ci_high"]) == (pytest.approx(low), pytest.approx(high))


def test_wilson_at_a_fractional_size_is_scipys_at_a_whole_one():
    for k, n in ((1, 24), (3, 10), (0, 20), (20, 20), (7, 9)):
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson(k / n, n) == (pytest.approx(ci.low, abs=1e-12), pytest.approx(ci.high, abs=1e-12))
    # between two whole sizes, between their widths
    width = lambda n: np.subtract(*wilson(0.3, n)[::-1])  # noqa: E731
    assert width(20) > width(20.5) > width(21)


def test_the_design_effect_widens_wilson_where_seeds_agree_within_examples():
    """Binary scores on n = 60 examples × m = 3 seeds: with one seed, plain Wilson; seeds that agree
    within each example (all three right or all wrong) count as about one draw per example, an interval
    as wide as Wilson's on n; independent seeds keep about Wilson's on n·m."""
    rng = np.random.default_rng(0)
    n, m = 60, 3
    single = (rng.random(n) < 0.3).astype(float)
    ci = stats.binomtest(int(single.sum()), n).proportion_ci(0.95, method="wilson")
    assert binary_interval(single, np.ones(n))[1:] == (pytest.approx(ci.low), pytest.approx(ci.high))
    agree = binary_interval(single, np.full(n, m))  # each example's mean is 0 or 1: seeds agree
    pooled = wilson(single.mean(), n * m)
    assert agree[1] < pooled[0] and agree[2] > pooled[1]
    assert agree[1:] == pytest.approx(wilson(single.mean(), n), abs=0.01)  # deff ≈ m
    independent = (rng.random((n, m)) < 0.3).astype(float).mean(1)
    p, low, high = binary_interval(independent, np.full(n, m))
    assert (high - low) == pytest.approx(np.subtract(*wilson(p, n * m)[::-1]), rel=0.15)
    assert 0 <= low < p < high <= 1
    # all wrong over every seed: nothing measures agreement, each example counts once (Wilson on n)
    assert binary_interval(np.zeros(n), np.full(n, m))[2] == pytest.approx(wilson(0.0, n)[1])


def test_a_cell_of_several_seeds_of_0_1_scores_is_wilson_with_the_design_effect(tmp_path):
    rng = np.random.default_rng(4)
    store = ResultStore(tmp_path)
    right = rng.random(N) < 0.5
    for seed in (0, 1, 2):  # each example right on some seeds: its mean is fractional
        scores = np.where(rng.random(N) < 0.8, right, ~right).astype(float)
        _write(store, method="autoregressive", split="test", seed=seed, scores=scores)
    ex = per_example(load_runs([tmp_path]))
    assert (ex["runs"] == 3).all() and ex["binary"].all() and not ex["score"].isin([0.0, 1.0]).all()
    (row,) = mean_over_seeds(load_runs([tmp_path])).to_dict("records")
    assert (row["score"], row["score_ci_low"], row["score_ci_high"]) == pytest.approx(
        binary_interval(ex["score"], ex["runs"])
    )


def test_the_randomisation_test_is_uniform_under_the_null_and_small_under_a_shift():
    # 300 null pairs, rejections at 5 % counted: a binomial count of sd 1.3 %; over 3000 such pairs this
    # test rejected 5.5 % (a fixed generator: the same draws every run)
    rng = np.random.default_rng(6)
    n = 30
    p_null = []
    for _ in range(300):  # A and B exchangeable within examples: differences symmetric about 0
        a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
        p_null.append(
            randomization_p(a[None], b[None], _sum_difference(n), n_flips=999, seed=int(rng.integers(1e9)))
        )
    p_null = np.array(p_null)
    assert np.mean(p_null < 0.05) < 0.07 and np.mean(p_null < 0.5) == pytest.approx(0.5, abs=0.1)
    a, b = rng.normal(0.8, 1, n), rng.normal(0, 1, n)
    assert randomization_p(a[None], b[None], _sum_difference(n)) < 0.01
    # acceptance: A's counts and B's swapped per example
    prop = np.full(n, 10.0)
    acc_a, acc_b = rng.binomial(10, 0.7, n).astype(float), rng.binomial(10, 0.4, n).astype(float)
    assert randomization_p(np.stack([acc_a, prop]), np.stack([acc_b, prop]), _sum_ratio_difference) < 0.01
    same = rng.binomial(10, 0.5, n).astype(float)
    assert randomization_p(np.stack([same, prop]), np.stack([same, prop]), _sum_ratio_difference) == 1.0


def test_holm_gives_the_textbook_adjusted_p_values():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.2, np.nan, 0.6])  # NaN is not a test: m = 2
    assert adjusted[0] == pytest.approx(0.4) and np.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.6)
    assert holm([0.5, 0.9]).max() <= 1.0
    assert holm_verdict(0.1, 0.01) == "better" and holm_verdict(-0.1, 0.01) == "worse"
    assert holm_verdict(0.1, 0.06) == "no difference shown" and holm_verdict(np.nan, 0.01) == "unknown"


def test_mean_interval_of_bounded_scores_is_the_bootstrap():
    rng = np.random.default_rng(2)
    rouge = np.where(rng.random(40) < 0.4, 0.0, rng.beta(2, 8, 40))  # skewed, a spike at 0
    m, low, high = mean_interval(rouge)
    assert (m, low, high) == bootstrap_interval(
        lambda a, axis=-1: a.mean(axis), [rouge]
    )  # the report's interval
    assert 0.0 <= rouge.min() <= low < m < high <= rouge.max() <= 1.0
    assert mean_interval([0.3, 0.3, 0.3]) == (pytest.approx(0.3), pytest.approx(0.3), pytest.approx(0.3))
    assert math.isnan(mean_interval([0.25])[1])
    with pytest.raises(ValueError, match="no scores"):
        mean_interval([])


def test_t_interval_is_scipys_and_clipped_to_bounds():
    # mean 3, s = sqrt(2.5), t_{0.975, 4} = 2.7764: half-width 2.7764 · sqrt(2.5/5) = 1.9632
    m, low, high = t_interval([1, 2, 3, 4, 5])
    assert m == 3 and low == pytest.approx(1.0368, abs=1e-4) and high == pytest.approx(4.9632, abs=1e-4)
    x = np.arange(10.0)  # 90 %: t_{0.95, 9} = 1.8331
    assert t_interval(x, 0.9)[2] - 4.5 == pytest.approx(1.8331 * x.std(ddof=1) / math.sqrt(10), abs=1e-4)
    assert t_interval([0.1, 0.9], bounds=(0.0, 1.0)) == (pytest.approx(0.5), 0.0, 1.0)  # 0.5 ± 5.08, clipped
    assert t_interval([0.7, 0.7, None, float("nan")]) == (
        pytest.approx(0.7),
        pytest.approx(0.7),
        pytest.approx(0.7),
    )
    assert math.isnan(t_interval([0.25])[1]) and all(math.isnan(v) for v in t_interval([None]))


def test_mean_over_seeds_pools_examples_and_seeds(tmp_path):
    """Two seeds of one setting: the cell's score is the mean over examples × seeds, its interval one
    bootstrap over examples (each with both seeds), not the average of two per-seed intervals."""
    rng = np.random.default_rng(0)
    store = ResultStore(tmp_path)
    per_seed = []
    for seed in (0, 1):
        scores = (rng.random(N) < 0.7).astype(float)
        acc, prop = rng.integers(0, 4, N), np.full(N, 4)
        per_seed.append((scores, acc, prop))
        _write(store, method="lossless", split="test", seed=seed, scores=scores, accepted=acc, proposed=prop)
    d = mean_over_seeds(load_runs([tmp_path]))
    (row,) = d.to_dict("records")
    assert row["n_seeds"] == 2 and row["interval_from"] == "examples"
    assert row["score"] == pytest.approx(np.mean([s.mean() for s, _, _ in per_seed]))
    assert row["acceptance_rate"] == pytest.approx(sum(a.sum() for _, a, _ in per_seed) / (2 * N * 4))
    assert row["score_ci_low"] < row["score"] < row["score_ci_high"]
    assert row["acceptance_ci_low"] < row["acceptance_rate"] < row["acceptance_ci_high"]
    # without the rows: a t-interval over the two seeds' values
    plain = mean_over_seeds(load_runs([tmp_path]), examples=False).iloc[0]
    assert plain["interval_from"] == "seeds" and plain["score"] == pytest.approx(row["score"])


def test_a_difference_pooled_over_cells_resamples_examples_not_cells():
    """Two cells over one task's examples (one problem at two temperatures): each example's differences
    are averaged over its cells, the estimate is their mean, and the bootstrap resamples examples, so a
    cell counted twice is the same evidence, where cells of different tasks are more."""
    rng = np.random.default_rng(5)
    ids = [f"e{i}" for i in range(60)]
    one = pd.Series(rng.choice([-1.0, 0.0, 0.0, 1.0], 60), index=pd.MultiIndex.from_product([["t"], ids]))
    other = pd.Series(rng.choice([0.0, 1.0], 60), index=one.index)
    both = pooled_difference([one, other], p_value=True)
    assert both["diff"] == pytest.approx((one.mean() + other.mean()) / 2) and both["n"] == 60
    assert both["cells"] == 2 and both["low"] < both["diff"] < both["high"]
    twice, once = pooled_difference([one, one]), pooled_difference([one])
    assert (twice["diff"], twice["low"], twice["high"]) == (once["diff"], once["low"], once["high"])
    elsewhere = one.copy()
    elsewhere.index = pd.MultiIndex.from_product([["u"], ids])  # the same values on another task's examples
    wider = pooled_difference([one, elsewhere])
    assert wider["n"] == 120 and wider["high"] - wider["low"] < once["high"] - once["low"]
    # an example missing from one cell counts once, at its other cell's value; NaN and empty cells drop
    part = pooled_difference([one.iloc[:30], other, pd.Series(dtype=float)])
    expected = pd.concat([(one.iloc[:30] + other.iloc[:30]) / 2, other.iloc[30:]]).mean()
    assert part["diff"] == pytest.approx(expected) and part["cells"] == 2 and part["n"] == 60
    # the sign-flip test: a shift every example shows is significant, a symmetric one is not
    assert pooled_difference([other], p_value=True)["p"] < 0.001
    assert pooled_difference([pd.Series([1.0, -1.0] * 30, index=one.index)], p_value=True)["p"] > 0.5
    nothing = pooled_difference([pd.Series(dtype=float)], p_value=True)
    assert math.isnan(nothing["diff"]) and math.isnan(nothing["p"]) and nothing["n"] == 0


def test_paired_difference_and_non_inferiority():
    rng = np.random.default_rng(3)
    base = pd.DataFrame(
        {
            "score": rng.random(200),
            "accepted": rng.integers(0, 5, 200),
            "proposed": np.full(200, 5),
            "verified": np.full(200, 5),
        },
        index=[f"e{i}" for i in range(200)],
    )
    better = base.assign(score=base["score"] + 0.05, accepted=np.minimum(base["accepted"] + 1, 5))
    d = paired(better, base)
    assert (
        d["diff"] == pytest.approx(0.05) and d["low"] == pytest.approx(0.05) and d["n"] == 200
    )  # constant shift
    a = paired(better, base, "acceptance_rate")
    assert a["low"] > 0 and verdict(a["low"], a["high"]) == "better"
    noisy = base.assign(score=base["score"] + rng.normal(0, 0.3, 200))
    r = paired(noisy, base)
    assert r["low"] < 0 < r["high"]
    # with its randomisation test: a clear shift is significant, noise is not, the interval is unchanged
    assert paired(better, base, p_value=True)["p"] < 0.001
    assert paired(better, base, "acceptance_rate", p_value=True)["p"] < 0.001
    noisy_p = paired(noisy, base, p_value=True)
    assert noisy_p["p"] > 0.05 and noisy_p["low"] == r["low"]
    # non-inferiority: a small loss within a wide margin holds; the same loss with no margin does not
    worse = base.assign(score=base["score"] - 0.01 + rng.normal(0, 0.05, 200))
    assert non_inferior(worse, base, 0.05)["holds"] and not non_inferior(worse, base, 0.0)["holds"]
    # only the examples both scored are paired
    assert paired(better.iloc[:50], base)["n"] == 50
    shown = non_inferior(worse, base, 0.05)
    assert shown["n_needed"] < shown["n_needed_at_diff"] < 200  # a loss of 0.01 needs more than none
    lost = -shown["diff"]  # a margin under the loss observed: no n shows it
    assert lost > 0 and non_inferior(worse, base, lost / 2)["n_needed_at_diff"] == math.inf
    assert per_example(pd.DataFrame([{"run_dir": None, "key": "k"}])) is None


def test_examples_needed_gives_the_power_it_promises():
    """Pass@1-like scores (0/1) where 10 % of the examples differ, half each way: at the n that
    `examples_needed` asks for, the one-sided 95 % bound of the mean difference clears −margin in
    about 80 % of simulated runs, and in about half as many at a quarter of that n."""
    rng = np.random.default_rng(0)
    pilot = rng.choice([-1.0, 0.0, 1.0], p=[0.05, 0.9, 0.05], size=400)
    margin = 0.02
    n = int(examples_needed(pilot, margin))
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.8)  # 1.645 + 0.842
    assert n == math.ceil((z * pilot.std(ddof=1) / margin) ** 2)

    def shown(size: int) -> float:
        d = rng.choice([-1.0, 0.0, 1.0], p=[0.05, 0.9, 0.05], size=(4000, size))
        low = d.mean(1) - 1.6449 * d.std(1, ddof=1) / math.sqrt(size)
        return float((low > -margin).mean())

    assert 0.76 < shown(n) < 0.84 and shown(n // 4) < 0.5
    assert examples_needed(pilot, margin, diff=-0.02) == math.inf  # a true loss of the margin: none
    assert examples_needed(pilot, margin, diff=-0.01) > n  # a smaller loss: more examples
    assert math.isnan(examples_needed(pilot[:1], margin))
    assert math.isnan(examples_needed(np.array([0.0, math.nan, 1.0]), margin))  # a missing score: unknown
    assert math.isnan(examples_needed(pilot, math.nan))


def test_knobs_are_chosen_on_validation_and_reported_on_test(tmp_path):
    """Static w = 0.5 is as good as autoregressive on validation and accepts most; on test w = 0.0
    happens to score highest. The table shows w = 0.5 (chosen on validation), the oracle view w = 0.0,
    and the paired table compares DIVERSED with the chosen setting."""
    rng = np.random.default_rng(0)
    store = ResultStore(tmp_path)
    ar = {split: (rng.random(N) < 0.8).astype(float) for split in ("validation", "test")}
    for split in ("validation", "test"):
        for seed in (0, 1):
            _write(store, method="autoregressive", split=split, seed=seed, scores=ar[split])
            for w, quality, acc in ((0.0, 0.3, 4), (0.5, 0.8, 3), (1.0, 0.8, 1)):
                scores = ar[split] if quality == 0.8 else (rng.random(N) < quality).astype(float)
                if split == "test" and w == 0.0:
                    scores = np.ones(N)  # the test split flatters w = 0: no choice may see it
                _write(
                    store,
                    method="static",
                    split=split,
                    seed=seed,
                    scores=scores,
                    accepted=np.full(N, acc),
                    proposed=np.full(N, 4),
                    weight=w,
                )
            _write(
                store,
                method="dynamic",
                split=split,
                seed=seed,
                scores=ar[split],
                accepted=np.full(N, 4),
                proposed=np.full(N, 4),
                head="/h",
            )
    records = load_runs([tmp_path])
    choices = choose_on(records[records["split"] == "validation"], margin=0.05)
    (c,) = choices[choices["method"] == "static"].to_dict("records")
    assert c["value"] == 0.5 and c["non_inferior"] and c["family"] == "weight" and c["diff"] == 0.0
    assert c["delta"] == pytest.approx(0.05 * ar["validation"].mean())

    out = tmp_path / "report"
    write_report([tmp_path], out)
    table = (out / "table_T1.md").read_text()
    assert "Static, chosen on validation" in table and "(w=0.5)" in table and "(w=0)" not in table
    assert "chosen on the validation split" in table and "δ = 0.05" in table
    oracle = (out / "table_oracle_T1.md").read_text()
    assert "Static, oracle (chosen on test)" in oracle and "(w=0)" in oracle
    diffs = (out / "paired_T1.md").read_text()
    # DIVERSED equals AR's outputs here: quality difference exactly 0; it accepts 4/4 against w = 0.5's 3/4
    line = next(x for x in diffs.splitlines() if "Static, chosen on validation" in x)
    assert "0.00 [0.00, 0.00] no difference shown" in line and "25.00 [25.00, 25.00] better" in line
    claims = (out / "claims.md").read_text()
    assert table.split("\n\n", 1)[1] in claims and "validation" not in set(
        pd.read_csv(out / "table_T1.csv").columns
    )


def test_a_table_names_the_split_its_knobs_were_chosen_on(tmp_path):
    """Knobs chosen on another split than "validation" (the real demo chooses on train articles):
    the table's rows name that split, never "validation"."""
    rng = np.random.default_rng(1)
    store = ResultStore(tmp_path)
    for split in ("train", "test"):
        ar = (rng.random(N) < 0.8).astype(float)
        _write(store, method="autoregressive", split=split, seed=0, scores=ar)
        for w, acc in ((0.5, 3), (1.0, 1)):
            _write(
                store,
                method="static",
                split=split,
                seed=0,
                scores=ar,
                accepted=np.full(N, acc),
                proposed=np.full(N, 4),
                weight=w,
            )
    out = tmp_path / "report"
    write_report([tmp_path], out, select_split="train")
    table = (out / "table_T1.md").read_text()
    assert "Static, chosen on train" in table and "(w=0.5)" in table
    assert "chosen on validation" not in table and "chosen on the train split" in table


def test_a_family_run_at_one_setting_is_not_labelled_chosen_on_test(tmp_path):
    """A family swept at a single setting on the reported split (fixed before, e.g. chosen on another
    task) was not chosen on test: its row says it is the only setting run; two settings there are the
    oracle view."""
    rng = np.random.default_rng(1)
    for name, weights in (("one", (0.3,)), ("two", (0.3, 0.7))):
        store = ResultStore(tmp_path / name)
        ar = (rng.random(N) < 0.8).astype(float)
        _write(store, method="autoregressive", split="test", seed=0, scores=ar)
        for w in weights:
            _write(
                store,
                method="static",
                split="test",
                seed=0,
                scores=ar,
                accepted=np.full(N, 3),
                proposed=np.full(N, 4),
                weight=w,
            )
        write_report([tmp_path / name], tmp_path / name / "report")
        # the count of settings a row was picked among sits beside the record's settings digest
        from diversed.analysis.fronts import best_at_quality

        picked = best_at_quality(load_runs([tmp_path / name]))
        static = picked[picked["method"] == "static"].iloc[0]
        assert static["settings"] == "s-test-0" and static["n_settings"] == len(weights)
        table = (tmp_path / name / "report" / "table_T1.md").read_text()
        if name == "one":
            assert "Static, the only setting run" in table and "oracle" not in table
        else:
            assert "Static, oracle (chosen on test)" in table and "only setting" not in table


def test_diversed_s_head_is_chosen_on_validation_by_the_same_rule(tmp_path):
    """Two heads: /h1 keeps autoregressive quality and accepts 3 of 4, /h2 accepts all but scores 0.3 on
    validation (and flatters itself on test). The rule every family follows takes /h1; the table shows
    that head alone, labelled as chosen."""
    rng = np.random.default_rng(1)
    store = ResultStore(tmp_path)
    ar = {split: (rng.random(N) < 0.8).astype(float) for split in ("validation", "test")}
    for split in ("validation", "test"):
        for seed in (0, 1):
            _write(store, method="autoregressive", split=split, seed=seed, scores=ar[split])
            for head, acc in (("/h1", 3), ("/h2", 4)):
                scores = ar[split] if head == "/h1" else (rng.random(N) < 0.3).astype(float)
                if split == "test" and head == "/h2":
                    scores = np.ones(N)
                _write(
                    store,
                    method="dynamic",
                    split=split,
                    seed=seed,
                    scores=scores,
                    accepted=np.full(N, acc),
                    proposed=np.full(N, 4),
                    head=head,
                )
    records = load_runs([tmp_path])
    choices = choose_on(records[records["split"] == "validation"], margin=0.05)
    (c,) = choices.to_dict("records")
    assert c["method"] == "dynamic" and c["family"] == "head" and c["value"] == "/h1" and c["non_inferior"]
    out = tmp_path / "report"
    write_report([tmp_path], out, formats=("png",))
    table = (out / "table_T1.md").read_text()
    rows = [x for x in table.splitlines() if "DIVERSED" in x]
    assert len(rows) == 1 and "DIVERSED, chosen on validation" in rows[0] and "| 75.00 [" in rows[0]
