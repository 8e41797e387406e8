"""`python -m diversed.show RUN... --export FILE`: every record and per-example row of runs as two tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from diversed.show import examples_file, export, run
from diversed.sweep.results import ResultStore, load_runs, run_record


def _run(run_dir, n_points: int, n_examples: int) -> ResultStore:
    """A run dir with records as evaluate writes them: nested timing, lists of runs, rows whose
    `extracted` is a number in one row and text in another, token lists."""
    store = ResultStore(run_dir)
    for i in range(n_points):
        record = run_record(
            pair="p",
            task="t",
            metric="accuracy",
            method="static",
            weight=i / 10,
            num_draft_tokens=3,
            temperature=1.0,
            seed=0,
            n_examples=n_examples,
            score=0.5,
            settings=f"s{i}",
            wall_time_s=1.0,
            wall_time_runs=[1.0, 1.1, 0.9],
            timing={"warmup": 1, "repeats": 3, "batch_size": 4, "device": "cpu"},
        )
        rows = [
            {
                "example_id": f"e{j}",
                "completion": f"c{j}",
                "score": float(j % 2),
                "new_tokens": 4,
                "accepted_drafts": 2,
                "extracted": j if j % 2 else f"text {j}",
                "tokens": [1, 2, j],
            }
            for j in range(n_examples)
        ]
        store.write(record, rows)
    return store


@pytest.mark.parametrize("ext", [".parquet", ".csv", ".jsonl"])
def test_export_round_trips_records_and_rows(tmp_path, ext):
    a, b = _run(tmp_path / "runs" / "a", 3, 5), _run(tmp_path / "runs" / "b", 2, 4)
    out = tmp_path / "out" / f"all{ext}"
    text = run([str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "b"), "--export", str(out)])
    assert "5 records" in text and "23 per-example rows" in text
    assert examples_file(out) == tmp_path / "out" / f"all.examples{ext}"

    read = {
        ".parquet": pd.read_parquet,
        ".csv": pd.read_csv,
        ".jsonl": lambda p: pd.read_json(p, lines=True),
    }[ext]
    records, rows = read(out), read(examples_file(out))
    stored = load_runs(tmp_path / "runs")
    assert len(records) == len(a.records()) + len(b.records()) == len(stored) == 5
    assert len(rows) == sum(len(s.examples(r["key"])) for s in (a, b) for r in s.records()) == 23
    assert {
        "key",
        "run_dir",
        "method",
        "weight",
        "score",
        "score_ci_low",
        "timing.batch_size",
        "timing.warmup",
    } <= set(records)
    assert "timing" not in records and set(records["timing.batch_size"]) == {4}
    assert {"run_dir", "key", "example_id", "score", "completion", "extracted", "tokens"} <= set(rows)
    assert set(records["key"]) == set(stored["key"])
    # the two tables join on (run_dir, key): every row finds its record
    joined = rows.merge(records, on=["run_dir", "key"], suffixes=("", "_record"), validate="many_to_one")
    assert len(joined) == len(rows) and joined["method"].eq("static").all()
    assert sorted(joined.groupby("key").size()) == [4, 4, 5, 5, 5]
    if ext == ".parquet":  # lists stay lists; mixed values become JSON text
        assert list(rows["tokens"].iloc[0]) == [1, 2, 0] and list(records["wall_time_runs"].iloc[0]) == [
            1.0,
            1.1,
            0.9,
        ]
        assert set(map(json.loads, rows["extracted"])) >= {1, "text 0"}
    if ext == ".csv":  # lists as JSON text
        assert json.loads(rows["tokens"].iloc[0]) == [1, 2, 0]


def test_export_refuses_an_unknown_format_and_missing_runs(tmp_path, capsys):
    _run(tmp_path / "a", 1, 2)
    with pytest.raises(SystemExit) as e:
        run([str(tmp_path / "a"), "--export", str(tmp_path / "out.xlsx")])
    assert e.value.code == 2 and ".parquet, .csv, .jsonl" in capsys.readouterr().err
    with pytest.raises(ValueError, match="extension"):
        export([tmp_path / "a"], tmp_path / "out.txt")
    with pytest.raises(FileNotFoundError):
        export([tmp_path / "nowhere"], tmp_path / "out.csv")
    text = run([str(tmp_path / "a"), str(tmp_path / "a")])  # one folder given twice: its points once
    assert text.count("Static w=0, N=3  score 0") == 1
