"""The paired table: verdicts by Holm over the table's randomisation tests, the number of tests stated,
and baselines whose outputs follow the target's law marked so."""

from __future__ import annotations

import re

import numpy as np
import pytest

from diversed.analysis.compare import mean_over_seeds
from diversed.analysis.tables import paired_table
from diversed.report import load_runs
from diversed.sweep.methods import exact_law
from diversed.sweep.results import ResultStore, run_record

N = 40


def _write(store, method, seed, scores, accepted=None, **knobs):
    record = run_record(
        pair="p",
        task="t",
        metric="accuracy",
        method=method,
        num_draft_tokens=None if method == "autoregressive" else 3,
        temperature=1.0,
        seed=seed,
        n_examples=N,
        score=float(np.mean(scores)),
        split="test",
        settings=f"s-{seed}",
        settings_group="g",
        comparison_group="c",
        acceptance_rate=None if accepted is None else float(np.mean(accepted) / 4),
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
            "proposed_drafts": None if accepted is None else 4,
            "verified_drafts": None if accepted is None else int(min(4, accepted[i] + 1)),
        }
        for i, s in enumerate(scores)
    ]
    store.write(record, rows)


def test_exact_law_names_the_settings_that_decode_as_the_target():
    exact = [
        {"method": "autoregressive", "temperature": 1.0},
        {"method": "hf_generate", "temperature": 1.0},
        {"method": "lossless", "temperature": 1.0},
        {"method": "finetuned_draft", "temperature": 1.0},
        {"method": "static", "weight": 1.0, "temperature": 1.0},
        {"method": "lossy", "lenience": 1.0, "temperature": 1.0},
        {"method": "lossy", "lenience": 0.5, "temperature": 0.0},  # greedy: accept while x = argmax p
        {"method": "typical", "typical_epsilon": 0.3, "temperature": 0.0},
    ]
    other = [
        {"method": "static", "weight": 0.9, "temperature": 1.0},
        {"method": "lossy", "lenience": 0.5, "temperature": 1.0},
        {"method": "typical", "typical_epsilon": 0.3, "temperature": 1.0},
        {"method": "cascade", "cascade_rule": "chow", "cascade_alpha": 0.1, "temperature": 0.0},
        {"method": "dynamic", "head": "/h", "temperature": 1.0},
        {"method": "my_own", "temperature": 1.0},
    ]
    assert all(exact_law(r) for r in exact) and not any(exact_law(r) for r in other)


def test_verdicts_are_holm_over_the_tables_tests_and_same_law_rows_are_marked(tmp_path):
    rng = np.random.default_rng(0)
    store = ResultStore(tmp_path)
    for seed in (0, 1):
        target = lambda: (rng.random(N) < 0.6).astype(float)  # noqa: E731  (the target's law, drawn anew)
        _write(store, "autoregressive", seed, target())
        _write(store, "lossless", seed, target(), rng.integers(0, 3, N))
        _write(store, "lossy", seed, target(), rng.integers(0, 3, N), lenience=1.0)
        _write(store, "static", seed, (rng.random(N) < 0.5).astype(float), rng.integers(2, 4, N), weight=0.5)
        _write(store, "dynamic", seed, target(), np.full(N, 4), head="/h")
    records = load_runs([tmp_path])
    table = paired_table(records, mean_over_seeds(records), 1.0)
    labels = list(table.index.get_level_values(2))
    marked = [x for x in labels if x.endswith("(target's law)")]
    assert len(marked) == 3 and any("Autoregressive" in x for x in marked)
    assert any("Lossy SD" in x for x in marked) and not any("Static" in x for x in marked)
    # tests: a score difference per baseline, an acceptance one per speculative baseline (3 + 3 + 1)
    assert table.attrs["verdicts"] == "verdicts: Holm over 7 tests, family-wise 5 %"
    cells = [c for c in table.to_numpy().ravel() if c and c != "–"]
    assert len(cells) == 7
    for cell in cells:
        m = re.fullmatch(
            r"-?\d+\.\d\d \[-?\d+\.\d\d, -?\d+\.\d\d\] (better|worse|no difference shown) \(Holm p (\S+)\)",
            cell,
        )
        assert m, cell
        word, p = m[1], float(m[2])
        assert (word != "no difference shown") == (p < 0.05), cell
    # DIVERSED accepts 4 of 4 against lossless SD's 0-2: better, far below 0.05 even after Holm
    row = table.xs("DIVERSED − SD (lossless) (target's law)", level=2).iloc[0]
    assert " better (Holm p " in row[("t", "Δ accepted/proposed %")]
    assert float(re.search(r"Holm p (\S+)\)", row[("t", "Δ accepted/proposed %")])[1]) == pytest.approx(
        7e-4, rel=0.01
    )
