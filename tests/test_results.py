"""Results files: keys, the crash-safe store, loading and Pareto fronts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diversed.analysis.fronts import pareto_front
from diversed.errors import ConfigError
from diversed.files import atomic
from diversed.sweep import results as R
from diversed.sweep.results import (
    GRID_FIELDS,
    ResultStore,
    grid_key,
    load_results,
    run_fields,
    run_record,
)

FIXTURE = Path(__file__).parent / "fixtures" / "results_small.jsonl"
ROOT = Path(__file__).resolve().parents[1]

BASE = dict(
    pair="tiny",
    task="gsm8k",
    method="static",
    weight=0.5,
    head=None,
    num_draft_tokens=4,
    temperature=0.0,
    seed=0,
    n_examples=3,
)


def point(**overrides) -> dict:
    """A run record of BASE with `overrides` (weight dropped unless static)."""
    fields = {**BASE, **overrides}
    if fields["method"] != "static":
        fields["weight"] = None
    record = dict(fields, metric="accuracy", score=2 / 3, acceptance_rate=0.7, wall_time_s=1.0)
    return record


def examples(n: int = 3) -> list[dict]:
    return [
        dict(example_id=str(i), completion=f"answer {i}", score=float(i % 2), new_tokens=5, accepted_drafts=3)
        for i in range(n)
    ]


# ---------------------------------------------------------------------------- keys and records


def test_grid_key_is_deterministic_and_normalised():
    k = grid_key(**BASE)
    assert k == grid_key(**dict(reversed(list(BASE.items()))))  # argument order does not matter
    assert k == grid_key(**{**BASE, "weight": 0.5000000001, "temperature": -0.0, "seed": np.int64(0)})
    assert k == grid_key(**BASE, score=0.3, rouge1=0.1)  # non-grid fields are ignored
    assert k == (
        "pair=tiny|task=gsm8k|method=static|weight=0.5|head=null|num_draft_tokens=4|temperature=0.0|seed=0|n_examples=3"
    )


def test_grid_key_distinct_for_every_field():
    changed = dict(
        pair="other",
        task="cnndm",
        method="lossless",
        weight=0.25,
        head="h.pt",
        num_draft_tokens=8,
        temperature=1.0,
        seed=1,
        n_examples=4,
    )
    assert set(changed) == set(GRID_FIELDS)
    keys = {grid_key(**BASE)} | {grid_key(**{**BASE, f: v}) for f, v in changed.items()}
    assert len(keys) == 1 + len(GRID_FIELDS)
    # strings that could be read as another value are quoted, so the key stays injective
    heads = [None, "null", "a|b", "a", '"a"', "a b"]
    assert len({grid_key(**{**BASE, "head": h}) for h in heads}) == len(heads)
    assert 'head="a|b"' in grid_key(**{**BASE, "head": "a|b"})
    fixture_keys = [json.loads(line)["key"] for line in FIXTURE.read_text().splitlines()]
    assert len(set(fixture_keys)) == len(fixture_keys) == 33


def test_run_record_fills_schema_and_checks_methods():
    r = run_record(**point(), rouge1=0.4)
    assert list(r)[: len(run_fields())] == list(run_fields())
    assert r["key"] == grid_key(**BASE) and r["rouge1"] == 0.4 and r["mean_w"] is None
    with pytest.raises(ValueError, match="weight"):
        run_record(**{**point(), "weight": None})  # static needs w
    with pytest.raises(ValueError, match="weight"):
        run_record(**{**point(method="lossless"), "weight": 1.0})
    with pytest.raises(ValueError, match="head"):
        run_record(**point(method="dynamic"))
    with pytest.raises(ValueError, match="num_draft_tokens"):
        run_record(**point(method="autoregressive"))
    with pytest.raises(ValueError, match="method"):
        run_record(**point(method="greedy"))
    with pytest.raises(ValueError, match="does not match"):
        run_record(**point(), key="stale")


# ---------------------------------------------------------------------------- the store


def lines(path: Path) -> list[dict]:
    """Every line of a JSONL file, failing on any that is not complete JSON."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]


def test_store_write_resume_and_overwrite(tmp_path):
    store = ResultStore(tmp_path)
    a = store.write(point(), examples())
    b = store.write(point(weight=0.25), examples(2))
    assert store.done_keys() == {a["key"], b["key"]}

    again = ResultStore(tmp_path)  # a resumed run sees both points as done
    assert again.done_keys() == {a["key"], b["key"]}
    assert [r["key"] for r in again.records()] == [a["key"], b["key"]]
    rows = again.examples(a["key"])
    assert [r["example_id"] for r in rows] == ["0", "1", "2"] and {r["key"] for r in rows} == {a["key"]}
    assert again.examples("no such key") == []

    again.write({**point(), "score": 0.9}, examples(1))  # redoing a point replaces it
    assert len(again.records()) == 2 and again.records()[-1]["score"] == 0.9
    assert len(again.examples(a["key"])) == 1
    assert sorted(p.name for p in (tmp_path / "examples").iterdir()) == sorted(
        f"{R.key_digest(k)}.jsonl" for k in (a["key"], b["key"])
    )


def test_store_rejects_bad_examples_before_writing(tmp_path):
    store = ResultStore(tmp_path)
    with pytest.raises(ValueError, match="lacks"):
        store.write(point(), [{"example_id": "0"}])
    with pytest.raises(ValueError, match="key"):
        store.write(point(), [dict(examples(1)[0], key="other")])
    assert store.done_keys() == set() and not store.results_path.exists()
    assert list((tmp_path / "examples").iterdir()) == []


def crash_on_call(monkeypatch, n: int) -> None:
    """Make the n-th write to a results file stop halfway, as if the process were killed."""
    calls = {"n": 0}
    real = atomic.write_all

    def torn(fd: int, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == n:
            real(fd, data[: len(data) // 2])
            raise KeyboardInterrupt("killed mid-write")
        real(fd, data)

    monkeypatch.setattr(atomic, "write_all", torn)


def test_crash_while_appending_the_record(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    done = store.write(point(weight=1.0), examples())
    crash_on_call(monkeypatch, 2)  # call 1: examples file, call 2: the record line
    with pytest.raises(KeyboardInterrupt):
        store.write(point(), examples())
    monkeypatch.undo()
    key = grid_key(**BASE)
    assert not store.results_path.read_bytes().endswith(b"\n")  # a torn line is on disk
    assert [r["key"] for r in load_results(store.results_path).to_dict("records")] == [done["key"]]

    # readers (show, report) change nothing: a sweep may be appending to the file right now
    before = store.results_path.read_bytes()
    assert [r["key"] for r in R.read_records(tmp_path)] == [done["key"]]
    assert len(R.read_examples(tmp_path, done["key"])) == 3 and R.read_examples(tmp_path, "nope") == []
    from diversed.show import show

    assert "points at temperature" in show(tmp_path, everything=True)
    assert store.results_path.read_bytes() == before

    resumed = ResultStore(tmp_path)  # opening repairs the file; the torn point is not done
    assert resumed.done_keys() == {done["key"]}
    assert [r["key"] for r in lines(store.results_path)] == [done["key"]]
    resumed.write(point(), examples())  # ...so the runner redoes it, exactly once
    assert [r["key"] for r in lines(store.results_path)] == [done["key"], key]
    assert len(lines(resumed.examples_path(key))) == 3


def test_crash_while_writing_examples(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    crash_on_call(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        store.write(point(), examples())
    monkeypatch.undo()
    key = grid_key(**BASE)
    assert list((tmp_path / "examples").iterdir()) == []  # never the final name; the temp file removed
    assert not store.results_path.exists()
    # what a kill -9 leaves instead (no handler runs): temp files, which the next writer deletes
    # (a pid that no longer runs: its writer was killed)
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    for sub in ("examples", "settings", "configs", "."):
        (tmp_path / sub).mkdir(exist_ok=True)
        (tmp_path / sub / f".abc.jsonl.tmp-{gone.pid}").write_text('{"half')

    resumed = ResultStore(tmp_path)
    assert resumed.done_keys() == set() and list((tmp_path / "examples").iterdir()) == []
    assert not list(tmp_path.rglob(".*.tmp-*"))
    resumed.write(point(), examples())
    assert resumed.done_keys() == {key} and len(lines(resumed.examples_path(key))) == 3


def test_killed_process_leaves_a_valid_store(tmp_path):
    """A real kill: the child dies (os._exit, no cleanup) halfway through its second record line."""
    results_py = str(ROOT / "diversed" / "sweep" / "results.py")
    child = textwrap.dedent(f"""
        import importlib.util, os
        # results.py alone: the package __init__ would import torch, which this test does not need
        spec = importlib.util.spec_from_file_location("results", {results_py!r})
        R = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(R)
        store = R.ResultStore({str(tmp_path)!r})
        ex = [dict(example_id="0", completion="c", score=1.0, new_tokens=1, accepted_drafts=0)]
        rec = dict(pair="tiny", task="gsm8k", metric="accuracy", method="lossless", num_draft_tokens=4,
                   temperature=0.0, seed=0, n_examples=1, score=1.0)
        store.write(rec, ex)
        real = R.atomic.write_all
        calls = []
        def dying(fd, data):
            calls.append(1)
            if len(calls) == 2:
                real(fd, data[:10])
                os._exit(9)
            real(fd, data)
        R.atomic.write_all = dying
        store.write(dict(rec, num_draft_tokens=8), ex)
    """)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    first = grid_key(**point(method="lossless", n_examples=1))
    second = grid_key(**point(method="lossless", n_examples=1, num_draft_tokens=8))

    store = ResultStore(tmp_path)
    assert store.done_keys() == {first}
    assert [r["key"] for r in lines(store.results_path)] == [first]
    store.write(dict(point(method="lossless", n_examples=1, num_draft_tokens=8)), examples(1))
    assert [r["key"] for r in lines(store.results_path)] == [first, second]


def test_records_keep_the_last_of_each_key(tmp_path):
    store = ResultStore(tmp_path)
    for score in (0.1, 0.2, 0.3):
        store.write({**point(), "score": score}, examples())
    store.write(point(weight=0.0), examples())
    assert len(lines(store.results_path)) == 4  # appends never rewrite the file...
    recs = ResultStore(tmp_path).records()  # ...readers dedup by key
    assert [(r["weight"], r["score"]) for r in recs] == [(0.5, 0.3), (0.0, 2 / 3)]


# ---------------------------------------------------------------------------- loading


def test_load_results_from_file():
    df = load_results(FIXTURE)
    assert len(df) == 33 and df["key"].is_unique
    assert list(df.columns[: len(run_fields())]) == list(run_fields())
    assert {"rouge1", "rougeL", "use_stemmer"} <= set(df.columns)
    assert str(df["num_draft_tokens"].dtype) == "Int64" and df["num_draft_tokens"].isna().sum() == 3
    # normalized_time, empty in the file, is wall time over the autoregressive wall time
    ar = df[df["method"] == "autoregressive"]
    assert (ar["normalized_time"] == 1.0).all()
    row = df[(df["task"] == "gsm8k") & (df["method"] == "lossless") & (df["temperature"] == 1.0)].iloc[0]
    assert row["normalized_time"] == pytest.approx(8.0 / 11.0)


def test_load_results_from_nested_dirs_and_parquet(tmp_path):
    multirun = tmp_path / "multirun" / "2025-01-01"
    ResultStore(multirun / "0").write(point(), examples())
    ResultStore(multirun / "1" / "nested").write({**point(), "score": 0.99}, examples())  # same key, later
    with pytest.raises(ConfigError, match=r"0/results.jsonl and .*nested/results.jsonl both hold") as e:
        load_results(tmp_path / "multirun")  # one point, two results: neither is taken
    assert "score 0.6666666666666666 against 0.99" in str(e.value)
    ResultStore(multirun / "1" / "nested").write({**point(), "score": 0.99}, examples())  # rewritten
    ResultStore(multirun / "0").write({**point(), "score": 0.99}, examples())  # ... in both: one point
    ResultStore(multirun / "1" / "nested").write(
        point(method="autoregressive", num_draft_tokens=None), examples()
    )
    ResultStore(multirun / "1" / "nested").write(
        {**point(method="lossless"), "normalized_time": 0.5}, examples()
    )
    # the same result, one record from before records named their sampler: one point, no refusal
    ResultStore(multirun / "0").write({**point(), "score": 0.99, "sampler": "inversion"}, examples())
    df = load_results(tmp_path / "multirun")
    assert len(df) == 3
    assert df.set_index("method").loc["static", "score"] == 0.99  # the last of a key in a file wins
    assert df.set_index("method").loc["lossless", "normalized_time"] == 0.5  # a set value is kept

    parquet = tmp_path / "extra.parquet"
    pd.DataFrame([run_record(**point(weight=0.0))]).to_parquet(parquet)
    both = load_results(FIXTURE, tmp_path / "multirun", parquet)
    assert len(both) == 33 + 3 + 1
    assert both.loc[both["key"] == grid_key(**point(weight=0.0)), "head"].isna().all()

    torn = tmp_path / "torn" / "results.jsonl"
    torn.parent.mkdir()
    torn.write_bytes(FIXTURE.read_bytes() + b'{"pair": "tiny", "ta')  # a crash left half a line
    assert len(load_results(torn.parent)) == 33
    assert load_results(tmp_path / "torn", FIXTURE).shape == (33, load_results(FIXTURE).shape[1])
    with pytest.raises(FileNotFoundError):
        load_results(tmp_path / "missing")


def test_dataframe_rows_round_trip_through_the_store(tmp_path):
    """Rows of a loaded frame (NaN, NA, numpy scalars) can be written back, e.g. after a fix-up."""
    df = load_results(FIXTURE)
    store = ResultStore(tmp_path)
    for row in df.to_dict("records"):
        store.write({**row, "tokens_per_s": np.float32(1.5)}, examples(1))
    assert store.done_keys() == set(df["key"])
    again = load_results(tmp_path)
    assert again.drop(columns="tokens_per_s").equals(df.drop(columns="tokens_per_s"))
    assert (again["tokens_per_s"] == 1.5).all()


# ---------------------------------------------------------------------------- Pareto fronts


def test_pareto_front_hand_made():
    pts = pd.DataFrame({"x": [1, 2, 3, 2, 3, 0, np.nan], "y": [5, 4, 3, 2, 3, 5, 1]}, index=list("ABCDEFG"))
    # maximise both: D is beaten by B and C, F by A (same y, less x); the C/E tie stays; G has no x
    assert list(pareto_front(pts, "x", "y").index) == ["A", "B", "C", "E"]
    # maximise x, minimise y (as for normalized_time): D beats A, B and F
    assert list(pareto_front(pts, "x", "y", maximize=(True, False)).index) == ["D", "C", "E"]
    assert list(pareto_front(pts, "x", "y", maximize=(False, False)).index) == ["F", "D"]
    assert pareto_front(pts.iloc[:0], "x", "y").empty


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.integers(0, 6, size=(60, 2)), columns=["score", "acceptance_rate"])
    front = set(pareto_front(df, "score", "acceptance_rate").index)
    for i, (x, y) in df.iterrows():
        beaten = (
            (df.score >= x) & (df.acceptance_rate >= y) & ((df.score > x) | (df.acceptance_rate > y))
        ).any()
        assert (i in front) == (not beaten)


def test_write_all_writes_everything(tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    atomic.write_all(fd, b"x" * 1_000_000)
    os.close(fd)
    assert (tmp_path / "f").stat().st_size == 1_000_000
