"""Results files: the record schema, a crash-safe resumable store, loading and Pareto fronts.

One *run record* is one grid point (pair × task × method × its knobs × N × temperature × seed × n):
a flat dict with the fields of `run_fields()` (plus free extras such as `rouge1`): its knobs' fields are
those of the registered methods (`methods.py`), and so is its key's (`key_fields`). Its
per-example rows (`EXAMPLE_FIELDS`, plus extras) go to a separate file. A run directory is

    run_dir/results.jsonl                 one JSON line per finished grid point
    run_dir/examples/<key digest>.jsonl   that point's per-example rows

`ResultStore.write` makes the examples file durable first (`atomic.write_file`), then appends
the record as one complete line (fsync). A grid point therefore counts as done only once its
record line is whole, and a killed process leaves at most a torn last line (truncated when the
store is next opened, found by reading the file backwards from its end) and a stale temp file
(deleted then); the point is simply redone. The store opens results.jsonl without following a
symbolic link: one there (a dangling one too) is refused (`atomic.NotAPlainFile`, naming it and the
fix) before anything is cut or appended.

Readers (`rundir.iter_jsonl`: line by line, never the whole file) keep the last record of each key
in a file; a key in several files (the jobs of a multirun share points, `siblings.py`; a folder given
twice or inside another) is one point where they agree on all but times, and a ConfigError naming both
files where they do not (`load_results`). They skip, naming each in one warning per file (file, line,
why), every line that is not one: a torn last line (silently: a kill leaves it), a line that is not
UTF-8, not JSON (whatever the parser fails on: a 5,000-digit integer, 100,000 nested brackets),
longer than `rundir.MAX_LINE_BYTES`, a JSON value that is not a record (`as_record`: an object with
pair, task, method and temperature, grid fields of their types, every number finite and ≥ 0,
scores and rates within [0, 1] (every task's metric is a fraction, and the report shows it ×100;
a score interval from an older writer's Student t, which could cross the range, is read clipped to
it) and each knob's value one its knob takes) or not an example row (`as_example`). Records of a method
that is not registered (a method of one's own whose module was not loaded) are refused by
`load_results` with the option that loads it.

It does not compute scores or timings (the runner does; `times.py` derives times from the runs and
fills them into older records as they load), nor lock the directory: its one writer, evaluate,
holds `rundir.hold` (Hydra multirun gives each job its own directory).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import numbers
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from diversed.decoding.stats import RECORD_FIELDS, RECORD_FLOATS, RECORD_FRACTIONS
from diversed.errors import ConfigError, MissingFile
from diversed.files import atomic, rundir
from diversed.files.rundir import iter_jsonl, json_line, read_jsonl
from diversed.sweep.methods import canonical_float, check_known, check_record_fields, knobs
from diversed.sweep.methods import method as find
from diversed.sweep.times import RUNS, TIME_FIELDS, fill_times, is_time_field

log = logging.getLogger(__name__)

# Fields that identify a grid point, in key order. `weight` and `head` are knobs (of the static ensembles and
# DIVERSED) that every key names, null or not, as the first keys did; a method's other knobs follow
# (`key_fields`).
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

# Every run record has these (missing measurements are None) and, after `method`, the field of each
# registered method's knob (`run_fields()`: w, the head, lossy SD's l, a cascade's rule and α, ...; each
# set for its method only, see methods.py); extra fields are kept as they are.
_SETTINGS_FIELDS = (
    "pair",  # model pair name (configs/pair/*.yaml)
    "task",
    "metric",  # the task's headline metric, e.g. "accuracy", "rouge2", "pass@1"
    "method",  # one of methods.METHODS
)
_MEASURED_FIELDS = (
    "num_draft_tokens",  # N drafts per round; None for autoregressive
    "temperature",  # 0.0 is greedy
    "seed",
    "n_examples",
    "score",  # mean task score
    # 95 % interval of the mean over the examples (intervals.mean_interval: Wilson for 0/1 scores)
    "score_ci_low",
    "score_ci_high",
    *RECORD_FIELDS,  # the decoding statistics (stats.RECORDED: acceptance_rate, alpha, mean_tv, ..., mean_w)
    "tokens_per_s",
    "wall_time_s",  # median of the timed passes over all examples (throughput, at the sweep's batch size)
    "time_per_token_s",  # wall_time_s / new tokens (lossy methods change output lengths)
    "latency_s",  # mean wall time per sample at batch 1 (timing.latency), median over passes
    # wall_time_s / the autoregressive point's, same pair/task/T/settings/seed (times.normalized)
    "normalized_time",
    "normalized_latency",  # latency_s / the autoregressive point's
    *TIME_FIELDS,  # per-token times, intervals over repeats, the baseline's batch size (times.py)
    "settings",  # digest of everything else that determined the output (settings/<digest>.json)
    "settings_group",  # the same without the seed: records averaged over seeds share it
    "comparison_group",  # the same without which examples (split, subset): validation and test runs share it
    "split",  # the task split scored (validation: where knobs are chosen; test: where they are reported)
    "key",  # grid_key(...) of the fields above
)


def run_fields() -> tuple[str, ...]:
    """The fields every run record has: pair, task, metric, method, every registered knob's field (w and
    the head first, where they always were), then N, T, seed, the measurements and the key."""
    registered = [f for f in knobs() if f not in GRID_FIELDS]
    return (*_SETTINGS_FIELDS, "weight", "head", *registered, *_MEASURED_FIELDS)


def key_fields(method: str) -> tuple[str, ...]:
    """The fields of a grid point's key: `GRID_FIELDS`, then the method's other knobs (set for it alone,
    so keys written before a knob existed stay the same), then `settings` where it is set (records from
    before fingerprints have none: they are read, never resumed into)."""
    return (*GRID_FIELDS, *(f for f in find(method).fields if f not in GRID_FIELDS))


# (evaluate's rows also have proposed_drafts and verified_drafts: the acceptance rate's and α's denominators
# per example, which the intervals of diversed.analysis.compare resample)
EXAMPLE_FIELDS = ("key", "example_id", "completion", "score", "new_tokens", "accepted_drafts")

_INT_FIELDS = ("num_draft_tokens", "seed", "n_examples")
_FLOAT_FIELDS = (
    "temperature",
    "score",
    "score_ci_low",
    "score_ci_high",
    "tokens_per_s",
    "wall_time_s",
    "time_per_token_s",
    "latency_s",
    "normalized_time",
    "normalized_latency",
    *RECORD_FLOATS,
)
# What readers check in a record besides its grid fields: numbers, finite and >= 0, fractions also <= 1
# (and each knob's value against its knob: `Knob.problem`).
_NUMBERS = (
    *_INT_FIELDS,
    *_FLOAT_FIELDS,
    *TIME_FIELDS,
    "new_tokens",
    "latency_new_tokens",
    "latency_examples",
    "scored_wall_time_s",
    "prompt_pass_s",
    "empty_rate",
    "capped_rate",
    *(f for f in RECORD_FIELDS if f not in RECORD_FLOATS),
)
_NUMBER_SET = frozenset(_NUMBERS)
_FRACTIONS = frozenset(
    ("score", "score_ci_low", "score_ci_high", "empty_rate", "capped_rate", *RECORD_FRACTIONS)
)
_COUNTS = ("new_tokens", "accepted_drafts", "proposed_drafts", "verified_drafts")  # an example row's
_RESULTS_NAME = "results.jsonl"


# ---------------------------------------------------------------------------- records


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA: what a DataFrame row holds where a record has None."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _norm(name: str, value: Any) -> Any:
    """Canonical form of a grid field, so equal settings give equal keys (0.5 == 0.50000000001)."""
    if _missing(value):
        return None
    knob = knobs().get(name)
    kind = knob.type if knob else int if name in _INT_FIELDS else float if name == "temperature" else str
    if kind is int:
        return int(value)
    if kind is float:
        return canonical_float(value)  # (T = 1e-8 is not T = 0)
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

    Uses the fields of `key_fields(method)` (pair, task and method are required, the others default
    to None; the method's knobs beyond w and the head only where set), then `settings` where it is set
    (`|settings=<digest>`), and ignores any others, so `grid_key(**record)` works. Values are normalised
    (ints; floats by `methods.canonical_float`; strings) and written as JSON, strings without quotes
    where they hold no `|`, space or quote and are not "null"; so the key is injective:
    different grid points never share a key.
    """
    missing = [f for f in ("pair", "task", "method") if _missing(fields.get(f))]
    if missing:
        raise ValueError(f"grid_key needs {missing}")
    names = [f for f in key_fields(fields["method"]) if f in GRID_FIELDS or not _missing(fields.get(f))]
    names += ["settings"] if not _missing(fields.get("settings")) else []
    return "|".join(f"{f}={_key_value(_norm(f, fields.get(f)))}" for f in names)


def run_record(**fields: Any) -> dict[str, Any]:
    """A checked run record: every `run_fields()` key present (None if not given), `key` filled
    in from the grid fields (and checked if given), extra fields kept."""
    check_record_fields(fields, _missing)
    names = run_fields()
    record = {f: fields.get(f) for f in names}
    record.update({k: v for k, v in fields.items() if k not in names})
    for f in (*GRID_FIELDS, *knobs(), "settings"):
        record[f] = _norm(f, record[f])
    key = grid_key(**record)
    if not _missing(fields.get("key")) and fields["key"] != key:
        raise ValueError(f"record key {fields['key']!r} does not match its fields ({key!r})")
    record["key"] = key
    return record


def key_digest(key: str) -> str:
    """A short file-name-safe digest of a key (names the examples file)."""
    return hashlib.sha1(key.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- what readers take


def _number(value: Any) -> float | None:
    """`value` as a float where it is a real number (not a bool; ±inf: an int no float holds), else None."""
    kind = type(value)
    if kind is float:  # (the JSON numbers first: readers ask for every field of every record)
        return value
    if kind is not int and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def _problem(name: str, value: Any, fraction: bool = False) -> str | None:
    """Why `value` cannot be the number `name` holds (None: it can, or it is missing). NaN is not missing
    here: JSON's null is, and the writer never writes NaN."""
    if value is None or value is pd.NA:
        return None
    number = _number(value)
    if number is None:
        return f"{name} is {value!r}, not a number"
    if not (math.isfinite(number) and 0 <= number <= (1 if fraction else math.inf)):
        return f"{name} is {value!r}, not {'in [0, 1]' if fraction else 'a finite number >= 0'}"
    return None


def as_record(row: Any) -> dict[str, Any]:
    """`row` as readers take a record (its key made from its fields where it has none, as parquet files
    may lack it); ValueError saying why it is not one (module docstring)."""
    if not isinstance(row, dict):
        raise ValueError(f"a JSON {type(row).__name__}, not a record")
    for f in ("pair", "task", "method", "temperature"):
        if _missing(row.get(f)) or row.get(f) == "":
            raise ValueError(f"no {f}")
    for f in ("pair", "task", "method"):
        if not isinstance(row[f], str):
            raise ValueError(f"{f} is {row[f]!r}, not a string")
    for f in ("score_ci_low", "score_ci_high"):  # older writers' Student-t interval could cross [0, 1]
        number = _number(row.get(f))
        if number is not None and math.isfinite(number):  # (a bool, NaN, inf: _problem names them below)
            row[f] = min(max(number, 0.0), 1.0)  # the interval clipped to the scores' range
    for f, value in [(f, v) for f, v in row.items() if v is not None and f in _NUMBER_SET]:  # (most are null)
        if why := _problem(f, value, f in _FRACTIONS):
            raise ValueError(why)
    for f, knob in knobs().items():
        value = row.get(f)
        if value is not None and not _missing(value) and (why := knob.problem(value)):
            raise ValueError(f"{f} {value!r} {why}")
    for f in RUNS.values():
        value = row.get(f)
        if value is None or _missing(value):
            continue
        if not (isinstance(value, list) and not any(_problem(f, v) for v in value)):
            raise ValueError(f"{f} is {value!r}, not a list of times")
    if _missing(row.get("key")):
        row["key"] = grid_key(**row)  # (a method not registered: ConfigError, a ValueError, naming the fix)
    elif not isinstance(row["key"], str):
        raise ValueError(f"key is {row['key']!r}, not a string")
    return row


def as_example(row: Any, key: str | None = None) -> dict[str, Any]:
    """`row` as readers take a per-example row of the grid point `key`: an object with an example_id,
    that key (if it names one), a score in [0, 1], counts >= 0, and as many w's as tokens
    (sweep.token_w); ValueError saying why it is not one."""
    if not isinstance(row, dict):
        raise ValueError(f"a JSON {type(row).__name__}, not an example row")
    if _missing(row.get("example_id")) or isinstance(row["example_id"], dict | list):
        raise ValueError(f"example_id is {row.get('example_id')!r}")
    if key is not None and row.get("key", key) != key:
        raise ValueError(f"key {row.get('key')!r} is another grid point's")
    if _missing(row.get("score")):
        raise ValueError("no score")
    for f, fraction in (("score", True), *((c, False) for c in _COUNTS)):
        if why := _problem(f, row.get(f), fraction):
            raise ValueError(why)
    w = row.get("token_w")
    if not _missing(w) and not (
        isinstance(w, list)
        and isinstance(row.get("token_text"), list)
        and len(w) == len(row["token_text"])
        and not any(_problem("w", v, True) for v in w)
    ):
        raise ValueError("token_w is not a w in [0, 1] for each of token_text")
    return row


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
        self.found = read_records(self.run_dir)  # the records as the store was opened (after the repair)
        self._done = {r["key"] for r in self.found}

    def _repair(self) -> None:
        """Undo what a killed writer left: cut a torn last record line (the file read backwards from its
        end, a chunk at a time), delete temp files. NotAPlainFile where results.jsonl is a link."""
        if os.path.lexists(self.results_path):
            fd = atomic.open_plain(self.results_path, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                end = _whole_lines_end(fd, size)
                if end < size:
                    os.ftruncate(fd, end)
                    os.fsync(fd)
            finally:
                os.close(fd)
        for sub in (self.run_dir, self.examples_dir, self.run_dir / "settings", self.run_dir / "configs"):
            atomic.remove_stale(sub)

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
        atomic.write_file(self.examples_path(key), b"".join(json_line(r) for r in rows))

        # 2. the record: one complete line appended; a crash here leaves a torn last line.
        new_file = not os.path.lexists(self.results_path)
        fd = atomic.open_plain(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            atomic.write_all(fd, json_line(record))
            os.fsync(fd)
        finally:
            os.close(fd)
        if new_file:
            atomic.fsync_path(self.run_dir)
        self._done.add(key)
        return record

    def records(self) -> list[dict[str, Any]]:
        """The run records, the last one of each key."""
        return read_records(self.run_dir)

    def examples(self, key: str) -> list[dict[str, Any]]:
        """The per-example rows of one grid point (empty if it has none)."""
        return read_examples(self.run_dir, key)


def _whole_lines_end(fd: int, size: int, chunk: int = 2**20) -> int:
    """The offset just past the last newline of the file `fd` (`size` bytes; 0: none), read backwards
    `chunk` bytes at a time."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        if (i := block.rfind(b"\n")) >= 0:
            return start + i + 1
        end = start
    return 0


# Readers of a run directory that change nothing in it (a sweep may be writing it: only its writer,
# `ResultStore`, repairs what a killed run left).


def examples_path(run_dir: str | Path, key: str) -> Path:
    return Path(run_dir) / "examples" / f"{key_digest(key)}.jsonl"


def with_examples(run_dir: str | Path, keys: Iterable[str]) -> set[str]:
    """The keys among `keys` whose grid point has a per-example file in `run_dir` (the directory listed
    once, not a file looked up per key: a run of a million points may have rows for few)."""
    try:
        names = set(os.listdir(Path(run_dir) / "examples"))
    except (FileNotFoundError, NotADirectoryError):
        return set()
    return {k for k in keys if f"{key_digest(k)}.jsonl" in names}


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run records of `run_dir`, the last one of each key; lines that are not records are skipped
    (a torn last line silently, the others named in a warning)."""
    path = Path(run_dir) / _RESULTS_NAME
    return _last_per_key(iter_jsonl(path, as_record)) if path.exists() else []


def read_examples(run_dir: str | Path, key: str) -> list[dict[str, Any]]:
    """The per-example rows of one grid point of `run_dir` (empty if it has none); lines that are not
    its rows are skipped and named in a warning."""
    path = examples_path(run_dir, key)
    return read_jsonl(path, lambda row: as_example(row, key)) if path.exists() else []


# ---------------------------------------------------------------------------- loading


def _result_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("results.*") if p.suffix in (".jsonl", ".parquet"))
    if path.suffix in (".jsonl", ".parquet"):
        return [path]
    raise ConfigError(f"{path}: expected a .jsonl or .parquet file or a directory")


def _run_files(path: Path) -> list[Path]:
    return sorted(path.rglob(_RESULTS_NAME))


def _take(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The rows of a table file that are records (`as_record`), the others named in one warning."""
    kept, bad = [], []
    for i, row in enumerate(rows):
        try:
            kept.append(as_record(row))
        except ValueError as e:
            bad.append(f"row {i}: {e}")
    rundir.skipped(path, bad, "row")
    return kept


def load_results(*paths: str | Path) -> pd.DataFrame:
    """Run records from result files (.jsonl, .parquet) and/or directories (searched
    recursively for results.jsonl / results.parquet, so a Hydra multirun dir works).

    One row per grid point (key): in one file the last written (a resumed run rewrites a point); a point
    in several files (the jobs of a multirun that share a baseline, a folder given twice or inside
    another given) is read once, from the first file given, where the files agree on everything but the
    times (`times.is_time_field`): one point decoded twice gives the same outputs. Where they differ, a
    ConfigError names both files, the point and a field that differs. Every `run_fields()` column is
    present, int fields as nullable Int64, and the times of older records filled in by
    `times.fill_times` (evaluate's rules: normalised by the same seed). Records of a method that is not
    registered: ConfigError naming the plugin option that loads it. Records are read as a stream and typed
    `_CHUNK_ROWS` at a time (a million of them are never held as dicts at once: 10^6 worst-case records
    load in 2.6 GB, 10^5 in 0.47 GB).
    """
    return _load(paths, _result_files).drop(columns=_SOURCE)


_CHUNK_ROWS = 20_000  # records held as dicts at once: a chunk becomes typed columns before the next
_SOURCE = "_file"  # while loading: the file a record was read from
# fields that say where a record was read or copied from, not what it measured
_WHERE = frozenset((_SOURCE, "run_dir", "reused_from", "key"))


def _load(paths: Sequence[str | Path], files_of: Any, found: list[Path] | None = None) -> pd.DataFrame:
    """The records of the files `files_of(path)` lists for each path (each file read once), typed, one
    per key (`_one_per_key`), times filled; `_SOURCE` names each one's file; `found` gets the files."""
    rows = _rows_of(paths, files_of, [] if found is None else found)
    frames = [_typed(chunk) for chunk in _chunks(rows, _CHUNK_ROWS)]
    if not frames:
        frames = [_typed([])]
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    del frames
    if _SOURCE not in df:
        df[_SOURCE] = pd.Series(dtype=object)
    check_known(df["method"].dropna().unique(), ", ".join(map(str, paths)))
    return fill_times(_one_per_key(df))


def _rows_of(paths: Sequence[str | Path], files_of: Any, found: list[Path]) -> Iterator[dict[str, Any]]:
    seen: set[Path] = set()
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise MissingFile(f"{p} does not exist (give results.jsonl/.parquet files or run directories)")
        for f in files_of(p):
            if (real := f.resolve()) in seen:  # a folder given twice, or inside another given
                continue
            seen.add(real)
            found.append(f)
            name = str(f)
            if f.suffix == ".parquet":
                frame = pd.read_parquet(f).astype(object)
                rows: Iterable[dict[str, Any]] = _take(frame.where(frame.notna(), None).to_dict("records"), f)
            else:
                rows = iter_jsonl(f, as_record)
            for row in rows:
                row[_SOURCE] = name
                yield row


def _one_per_key(df: pd.DataFrame) -> pd.DataFrame:
    """One row per key: in a file the last (in the order of the last writes, as a re-inserted dict
    keeps), across files the first file's, once `_same_point` has checked that they agree."""
    df = df.drop_duplicates(["key", _SOURCE], keep="last")
    twice = df["key"].duplicated(keep=False)
    if twice.any():
        _same_point(df[twice])
        df = df.drop_duplicates("key", keep="first")
    return df.reset_index(drop=True)


def _comparable(value: Any) -> Any:
    """A field's value as `_same_point` compares it: missing as None, lists and dicts as JSON text."""
    if isinstance(value, list | dict | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return None if _missing(value) else value


def _shown(value: Any) -> str:
    return repr(value.item() if hasattr(value, "item") else _comparable(value))


# What two records of one point may differ in without differing in result: where they were read from, and
# the sampler's name (records written before it was recorded have none; a scheme that drew other tokens
# shows in the outputs compared here).
_NOT_RESULTS = _WHERE | {"sampler"}


def _same_point(d: pd.DataFrame) -> None:
    """The records of points read from more than one file (one per file): ConfigError where two of one
    key differ in anything but times, where they were read from and the sampler's name (`_NOT_RESULTS`);
    a warning where only times do."""
    fields = [c for c in d.columns if c not in _NOT_RESULTS and not is_time_field(c)]
    clocks = [c for c in d.columns if c not in _WHERE and is_time_field(c)]
    for cols, same in ((fields, False), (clocks, True)):
        if not cols:
            continue
        values = d[cols].map(_comparable)
        values["key"] = d["key"].to_numpy()
        counts = values.groupby("key", sort=False).nunique(dropna=False)
        differ = counts[(counts > 1).any(axis=1)]
        if differ.empty:
            continue
        key = differ.index[0]
        field = next(c for c in cols if differ.loc[key, c] > 1)
        rows = d[d["key"] == key]
        first = rows.iloc[0]
        other = next(
            r for _, r in rows.iloc[1:].iterrows() if _comparable(r[field]) != _comparable(first[field])
        )
        if same:
            log.warning(
                f"{len(differ)} grid point(s) are in more than one file with the same outputs but "
                f"other times (e.g. {field} in {first[_SOURCE]} and {other[_SOURCE]}): each is read once, "
                "its times from the first file given"
            )
            return
        raise ConfigError(
            f"{first[_SOURCE]} and {other[_SOURCE]} both hold the grid point {key} (the same settings and "
            f"seed) with different results: {field} {_shown(first[field])} against {_shown(other[field])}. "
            "One point "
            "cannot have two results (were they decoded on other machines or code versions?): read them "
            "apart, one report each, or re-run one of them into its own folder with other settings"
        )


def _chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _typed(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Records as a frame: every `run_fields()` column present and first, int fields as nullable
    Int64, float fields as float (so chunks of records concatenate into the same columns)."""
    df = pd.DataFrame(rows)
    names = run_fields()
    for f in names:
        if f not in df:
            df[f] = None
    df = df[list(names) + [c for c in df.columns if c not in names]]
    numbers = {f: k.type for f, k in knobs().items() if k.type is not str}
    for f in (*_INT_FIELDS, *(f for f, t in numbers.items() if t is int)):
        df[f] = pd.to_numeric(df[f]).astype("Int64")
    for f in (*_FLOAT_FIELDS, *(f for f, t in numbers.items() if t is float)):
        df[f] = pd.to_numeric(df[f]).astype(float)
    return df


def with_head_task(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with `head_task`, the task each record's head was trained on (what legends and tables name a
    head by), read from the head's head_config.json where a record lacks it (records written before
    evaluate stored it; a moved or deleted head gives None)."""
    if "head_task" not in df:
        df["head_task"] = None
    missing = df["head"].notna() & df["head_task"].isna()
    if missing.any():  # only then: models.heads imports torch
        from diversed.models.heads import head_metadata  # torch-free at import (results, plots)

        df.loc[missing, "head_task"] = [head_metadata(h).get("task") for h in df.loc[missing, "head"]]
    return df


def load_runs(*run_dirs: str | Path) -> pd.DataFrame:
    """`load_results` of every results.jsonl under the run dirs (searched recursively: a Hydra multirun
    dir works; a point in several of them read once, as there), with `run_dir`, the directory holding
    the file it was read from: where the record's per-example rows are (`read_examples(row.run_dir,
    row.key)`). Raises MissingFile (a FileNotFoundError) when there is none."""
    for run in run_dirs:
        if not Path(run).exists():
            raise MissingFile(
                f"{run}: no such run directory (give run directories of python -m diversed.evaluate)"
            )
    found: list[Path] = []
    df = _load(run_dirs, _run_files, found)
    if not found:
        raise MissingFile(
            f"no {_RESULTS_NAME} under {', '.join(map(str, run_dirs))}: give run directories of "
            "python -m diversed.evaluate"
        )
    df["run_dir"] = [str(Path(f).parent) for f in df[_SOURCE]]
    return df.drop(columns=_SOURCE)
