"""The times table from records with per-example latencies: geometric means over examples × seeds with
positive intervals, and the quality of the samples the latency passes timed."""

from __future__ import annotations

import re

import numpy as np

from diversed.analysis.compare import mean_over_seeds
from diversed.analysis.tables import TIMED_QUALITY, times_table, with_times
from diversed.report import load_runs
from diversed.sweep.results import ResultStore, run_record


def _record(method: str, seed: int, seconds, scores) -> dict:
    n = len(seconds)
    return run_record(
        **{
            "pair": "p",
            "task": "t",
            "metric": "accuracy",
            "method": method,
            "num_draft_tokens": None if method == "autoregressive" else 3,
            "temperature": 1.0,
            "seed": seed,
            "n_examples": n,
            "settings_group": "g",
            "comparison_group": "c",
            "split": "test",
            "score": float(np.mean(scores)),
            "latency_s": float(np.mean(seconds)),
            "latency_examples": n,
            "latency_new_tokens": 10 * n,
            "latency_example_ids": [f"e{i}" for i in range(n)],
            "latency_example_s": list(seconds),
            "latency_example_tokens": [10] * n,
            "latency_example_scores": list(scores),
            "settings": f"s{seed}",
        }
    )


def test_times_table_shows_geometric_means_and_the_timed_samples_quality(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for seed in (0, 1, 2):
        ar = rng.uniform(0.5, 1.5, 20)
        rows.append(_record("autoregressive", seed, ar, [1.0] * 10 + [0.0] * 10))
        rows.append(
            _record("lossless", seed, ar * np.exp(rng.normal(np.log(0.5), 0.3, 20)), [1.0] * 5 + [0.0] * 15)
        )
    store = ResultStore(tmp_path)
    for r in rows:
        store.write(r, [])
    df = load_runs([tmp_path])  # normalised by each seed's autoregressive record as it loads
    d = with_times(mean_over_seeds(df), df)
    table = times_table(d, 1.0)
    cell = table.loc[("p", "SD (lossless)", "3"), ("t", "× AR / sample")]
    value, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell).groups())
    assert 0 < low < value < high and 0.4 < value < 0.6
    assert table.loc[("p", "SD (lossless)", "3"), ("t", TIMED_QUALITY)] == "25.00"
    assert table.loc[("p", "Autoregressive", "–"), ("t", TIMED_QUALITY)] == "50.00"
    assert table.loc[("p", "Autoregressive", "–"), ("t", "× AR / sample")] == "1.00 [1.00, 1.00]"
