"""Results files: the record schema, a crash-safe resumable store, loading and Pareto fronts.

One *run record* is one grid point (pair × task × method × w × N × temperature × seed × n):
a flat dict with the fields of `RUN_FIELDS` (plus free extras such as `rouge1`). Its
per-example rows (`EXAMPLE_FIELDS`, plus extras) go to a separate file. A run directory is

    run_dir/results.jsonl                 one JSON line per finished grid point
    run_dir/examples/<key digest>.jsonl   that point's per-example rows

`ResultStore.write` makes the examples file durable first (temp file, fsync, `os.replace`),
then appends the record as one complete line (fsync). A grid point therefore counts as done
only once its record line is whole, and a killed process leaves at most a torn last line
(truncated when the store is next opened) and a stale temp file (deleted then); the point is
simply redone. Readers skip torn lines and keep the last record of each key.

It does not compute scores or timings (the runner does; `times.py` derives times from the runs and
fills them into older records as they load), nor lock the files: one writer per run directory is
assumed (Hydra multirun gives each job its own directory).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from diversed.errors import ConfigError, MissingFile
from diversed.methods import FLOAT_KNOBS, check_record_fields
from diversed.times import TIME_FIELDS, fill_times

# Fields that identify a grid point, in key order.
GRID_FIELDS = (
    "pair",
    "task",
    "method",
    "weight",
    "head",
    "num_draft_tokens",
    "temperature",
    "seed",
    "n_examples",
)
# Fields that join the key only when set, so that keys written before they existed stay the same
# (such records are read, never resumed into: their key lacks the settings digest).
OPTIONAL_GRID_FIELDS = ("lenience", "cascade_rule", "cascade_alpha", "typical_epsilon", "typical_delta",
                        "draft_model", "settings")  # fmt: skip

# Every run record has these (missing measurements are None); extra fields are kept as they are.
RUN_FIELDS = (
    "pair",  # model pair name (configs/pair/*.yaml)
    "task",
    "metric",  # the task's headline metric, e.g. "accuracy", "rouge2", "pass@1"
    "method",  # one of methods.METHODS
    "weight",  # w, the weight on the target in v = w·p + (1−w)·q; static only
    "head",  # path or name of the trained weighting head; dynamic only
    "lenience",  # lossy SD's l
    "cascade_rule",  # chow | diff | opt
    "cascade_alpha",
    "typical_epsilon",  # typical acceptance's ε and δ
    "typical_delta",
    "draft_model",  # the fine-tuned draft (finetuned_draft)
    "num_draft_tokens",  # N drafts per round; None for autoregressive
    "temperature",  # 0.0 is greedy
    "seed",
    "n_examples",
    "score",  # mean task score
    "score_ci_low",  # 95 % interval of the mean over the examples (compare.mean_interval: Wilson for 0/1 scores)
    "score_ci_high",
    "acceptance_rate",  # accepted drafts / proposed drafts
    "alpha",  # accepted drafts / verified drafts (up to and including a round's first rejection)
    "mean_tv",  # mean TV(p, q) over the verified drafts, sampled decoding: Proposition 1's α = 1 − w·mean_tv
    "mean_accepted_length",  # mean accepted drafts per round
    "tokens_per_target_call",
    "tokens_per_s",
    "wall_time_s",  # median of the timed passes over all examples (throughput, at the sweep's batch size)
    "time_per_token_s",  # wall_time_s / new tokens (lossy methods change output lengths)
    "latency_s",  # mean wall time per sample at batch 1 (timing.latency), median over passes
    "normalized_time",  # wall_time_s / the autoregressive point's, same pair/task/T/settings/seed (times.normalized)
    "normalized_latency",  # latency_s / the autoregressive point's
    *TIME_FIELDS,  # per-token times, intervals over repeats, the baseline's batch size (times.py)
    "mean_w",  # mean w over emitted tokens: the head's (dynamic), the deferral rate (cascade)
    "settings",  # digest of everything else that determined the output (settings/<digest>.json)
    "settings_group",  # the same without the seed: records averaged over seeds share it
    "comparison_group",  # the same without which examples (split, subset): validation and test runs share it
    "split",  # the task split scored (validation: where knobs are chosen; test: where they are reported)
    "key",  # grid_key(...) of the fields above
)

# (evaluate's rows also have proposed_drafts and verified_drafts: the acceptance rate's and α's denominators
# per example, which the intervals of diversed.compare resample)
EXAMPLE_FIELDS = ("key", "example_id", "completion", "score", "new_tokens", "accepted_drafts")

_INT_FIELDS = ("num_draft_tokens", "seed", "n_examples")
_FLOAT_FIELDS = (
    "weight", "lenience", "cascade_alpha", "typical_epsilon", "typical_delta", "temperature", "score", "score_ci_low", "score_ci_high", "acceptance_rate", "mean_accepted_length",
    "tokens_per_target_call", "tokens_per_s", "wall_time_s", "time_per_token_s", "latency_s", "normalized_time",
    "normalized_latency", "mean_w", "alpha", "mean_tv",
)  # fmt: skip
_RESULTS_NAME = "results.jsonl"
_TMP_PREFIX = ".tmp-"


# ---------------------------------------------------------------------------- records


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA: what a DataFrame row holds where a record has None."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _norm(name: str, value: Any) -> Any:
    """Canonical form of a grid field, so equal settings give equal keys (0.5 == 0.50000000001)."""
    if _missing(value):
        return None
    if name in _INT_FIELDS:
        return int(value)
    if name == "temperature" or name in FLOAT_KNOBS:
        return round(float(value), 6) + 0.0  # + 0.0 turns -0.0 into 0.0
    return str(value)


_BARE = re.compile(r"[A-Za-z0-9_.,:@+/-]+")


def _key_value(value: Any) -> str:
    """A value as it appears in a key: strings bare where that is unambiguous, else JSON."""
    if isinstance(value, str) and _BARE.fullmatch(value) and value != "null":
        return value
    return json.dumps(value)


def grid_key(**fields: Any) -> str:
    """A deterministic, human-readable key of one grid point, e.g.
    `pair=tiny|task=gsm8k|method=static|weight=0.5|head=null|num_draft_tokens=4|temperature=0.0|seed=0|n_examples=50`.

    Uses the fields of `GRID_FIELDS` (pair, task and method are required, the others default
    to None), then those of `OPTIONAL_GRID_FIELDS` that are set (`|settings=<digest>`), and
    ignores any others, so `grid_key(**record)` works. Values are normalised
    (ints; floats rounded to 6 decimals; strings) and written as JSON, strings without quotes
    where they hold no `|`, space or quote and are not "null"; so the key is injective:
    different grid points never share a key.
    """
    missing = [f for f in ("pair", "task", "method") if _missing(fields.get(f))]
    if missing:
        raise ValueError(f"grid_key needs {missing}")
    names = GRID_FIELDS + tuple(f for f in OPTIONAL_GRID_FIELDS if not _missing(fields.get(f)))
    return "|".join(f"{f}={_key_value(_norm(f, fields.get(f)))}" for f in names)


def run_record(**fields: Any) -> dict[str, Any]:
    """A checked run record: every `RUN_FIELDS` key present (None if not given), `key` filled
    in from the grid fields (and checked if given), extra fields kept."""
    check_record_fields(fields, _missing)
    record = {f: fields.get(f) for f in RUN_FIELDS}
    record.update({k: v for k, v in fields.items() if k not in RUN_FIELDS})
    for f in GRID_FIELDS + OPTIONAL_GRID_FIELDS:
        record[f] = _norm(f, record[f])
    key = grid_key(**record)
    if not _missing(fields.get("key")) and fields["key"] != key:
        raise ValueError(f"record key {fields['key']!r} does not match its fields ({key!r})")
    record["key"] = key
    return record


def key_digest(key: str) -> str:
    """A short file-name-safe digest of a key (names the examples file)."""
    return hashlib.sha1(key.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- JSONL I/O


def _jsonable(value: Any) -> Any:
    """Plain JSON values: NaN, inf and pandas' NA become None; numpy/torch values Python ones."""
    if value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return None  # strict JSON has no NaN/inf
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy / torch scalars and arrays
        return _jsonable(value.tolist())
    if isinstance(value, Path):
        return str(value)
    return value


def json_line(row: Mapping[str, Any]) -> bytes:
    """One row as a strict JSON line (UTF-8 bytes, newline-terminated), as the results files hold it."""
    return (json.dumps(_jsonable(row), allow_nan=False, ensure_ascii=False) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    """The single place bytes reach a results file (tests replace it to simulate a crash)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file; a torn last line (a crash) and bad lines are skipped."""
    rows = []
    data = Path(path).read_bytes()
    n_complete = data.count(b"\n")  # a line after the last newline is torn
    for i, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < n_complete:  # a torn last line is expected after a crash, a bad complete one is not
                warnings.warn(f"{path}: skipping unreadable line {i + 1}", stacklevel=2)
    return rows


def _last_per_key(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_key.pop(row["key"], None)  # re-insert so the order is that of the last write
        by_key[row["key"]] = row
    return list(by_key.values())


# ---------------------------------------------------------------------------- store


class ResultStore:
    """Run records and per-example rows of one run directory; see the module docstring."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.results_path = self.run_dir / _RESULTS_NAME
        self.examples_dir = self.run_dir / "examples"
        self.examples_dir.mkdir(parents=True, exist_ok=True)
        self._repair()
        self._done = (
            {r["key"] for r in read_jsonl(self.results_path)} if self.results_path.exists() else set()
        )

    def _repair(self) -> None:
        """Undo what a killed writer left: cut a torn last record line, delete temp files."""
        if self.results_path.exists():
            data = self.results_path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(self.results_path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
                    os.fsync(f.fileno())
        for tmp in self.examples_dir.glob(_TMP_PREFIX + "*"):
            tmp.unlink()

    def done_keys(self) -> set[str]:
        """Keys of the grid points whose record is written (skip these when resuming)."""
        return set(self._done)

    def examples_path(self, key: str) -> Path:
        return examples_path(self.run_dir, key)

    def write(self, record: Mapping[str, Any], examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Write one grid point: its examples file (atomically), then its record line. Returns
        the checked record (`run_record(**record)`). Writing a key again replaces it."""
        record = run_record(**record)
        key = record["key"]
        rows = []
        for i, ex in enumerate(examples):
            missing = [f for f in EXAMPLE_FIELDS if f != "key" and f not in ex]
            if missing:
                raise ValueError(f"example {i} lacks {missing}")
            if ex.get("key", key) != key:
                raise ValueError(f"example {i} has key {ex['key']!r}, not the record's")
            rows.append({"key": key, **{k: v for k, v in ex.items() if k != "key"}})

        # 1. examples: temp file, fsync, atomic rename; a crash here leaves only the temp file.
        final = self.examples_path(key)
        tmp = final.with_name(f"{_TMP_PREFIX}{os.getpid()}-{final.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, b"".join(json_line(r) for r in rows))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        _fsync_dir(self.examples_dir)

        # 2. the record: one complete line appended; a crash here leaves a torn last line.
        new_file = not self.results_path.exists()
        fd = os.open(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_all(fd, json_line(record))
            os.fsync(fd)
        finally:
            os.close(fd)
        if new_file:
            _fsync_dir(self.run_dir)
        self._done.add(key)
        return record

    def records(self) -> list[dict[str, Any]]:
        """The run records, the last one of each key."""
        return read_records(self.run_dir)

    def examples(self, key: str) -> list[dict[str, Any]]:
        """The per-example rows of one grid point (empty if it has none)."""
        return read_examples(self.run_dir, key)


# Readers of a run directory that change nothing in it (a sweep may be writing it: only its writer,
# `ResultStore`, repairs what a killed run left).


def examples_path(run_dir: str | Path, key: str) -> Path:
    return Path(run_dir) / "examples" / f"{key_digest(key)}.jsonl"


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run records of `run_dir`, the last one of each key; a torn last line is skipped."""
    path = Path(run_dir) / _RESULTS_NAME
    return _last_per_key(read_jsonl(path)) if path.exists() else []


def read_examples(run_dir: str | Path, key: str) -> list[dict[str, Any]]:
    """The per-example rows of one grid point of `run_dir` (empty if it has none)."""
    path = examples_path(run_dir, key)
    return read_jsonl(path) if path.exists() else []


# ---------------------------------------------------------------------------- loading


def _result_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("results.*") if p.suffix in (".jsonl", ".parquet"))
    if path.suffix in (".jsonl", ".parquet"):
        return [path]
    raise ConfigError(f"{path}: expected a .jsonl or .parquet file or a directory")


def load_results(*paths: str | Path) -> pd.DataFrame:
    """Run records from result files (.jsonl, .parquet) and/or directories (searched
    recursively for results.jsonl / results.parquet, so a Hydra multirun dir works).

    Concatenated in the order given (files of a directory in sorted order), one row per key
    (the last), every `RUN_FIELDS` column present, int fields as nullable Int64, and the times of
    older records filled in by `times.fill_times` (evaluate's rules: normalised by the same seed).
    """
    rows: list[dict[str, Any]] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise MissingFile(f"{p} does not exist (give results.jsonl/.parquet files or run directories)")
        for f in _result_files(p):
            if f.suffix == ".parquet":
                frame = pd.read_parquet(f).astype(object)
                rows.extend(frame.where(frame.notna(), None).to_dict("records"))
            else:
                rows.extend(read_jsonl(f))
    for row in rows:
        if row.get("key") is None:
            row["key"] = grid_key(**row)
    df = pd.DataFrame(_last_per_key(rows))
    for f in RUN_FIELDS:
        if f not in df:
            df[f] = None
    df = df[list(RUN_FIELDS) + [c for c in df.columns if c not in RUN_FIELDS]].reset_index(drop=True)
    for f in _INT_FIELDS:
        df[f] = pd.to_numeric(df[f]).astype("Int64")
    for f in _FLOAT_FIELDS:
        df[f] = pd.to_numeric(df[f]).astype(float)
    return fill_times(df)


def load_runs(*run_dirs: str | Path) -> pd.DataFrame:
    """`load_results` of every results.jsonl under the run dirs (searched recursively: a Hydra multirun
    dir works), with `run_dir`, the directory holding the file: where the record's per-example rows are
    (`read_examples(row.run_dir, row.key)`). Raises MissingFile (a FileNotFoundError) when there is none."""
    frames = []
    for run in run_dirs:
        if not Path(run).exists():
            raise MissingFile(f"{run}: no such run directory (give run directories of python -m diversed.evaluate)")
        for f in sorted(Path(run).rglob(_RESULTS_NAME)):
            d = load_results(f)
            d["run_dir"] = str(f.parent)
            frames.append(d)
    if not frames:
        raise MissingFile(f"no {_RESULTS_NAME} under {', '.join(map(str, run_dirs))}: give run directories of "
                                "python -m diversed.evaluate")  # fmt: skip
    return pd.concat(frames, ignore_index=True)
