"""Files of a run directory: each written whole or not at all, one writer at a time, and read back
with a warning that names what cannot be read.

- Every file of a run directory (and of a report) is written whole by `atomic.write_file` (temp
  file beside it, fsync, `os.replace`, fsync of the directory): a kill or a full disk leaves the old
  file (or none) and at most that temp file, never a torn one; the writer, once it holds the
  directory, removes such leftovers (`atomic.remove_stale`).
- `hold(run_dir)`: the writer's advisory lock (`fcntl.flock` on `<run_dir>/.lock`), held while
  the block runs and released by the kernel when the process ends however it ends (kill -9
  too), so a stale lock file never blocks. The holder writes its pid, host, command line and
  start into the file; a second writer is refused at once with them. A directory that cannot be
  written (read-only) gives False instead of a lock: the caller may read but not write.
- `keep_settings(run_dir, digest, settings, config)`: `settings/<digest>.json` and
  `configs/<digest>.yaml`, written once; a file that does not parse (torn by an older version's
  plain write) is written again.
- `json_line(row)`: a row as a strict JSON line; `read_jsonl(path, take)`: the lines of a file
  that `take` accepts, every other (not UTF-8, not JSON, rejected) named in one warning with its
  line number and why, but a torn last line (a kill leaves it), which is skipped silently;
  `skipped(path, bad)` is that warning (also for the rows of a table file).
- `read_json(path)`: a JSON object file, or None with a warning naming the file and why.

It knows nothing of what records hold (`results.py`) or what a fingerprint holds (`sweep/grid.py`);
readers take no lock (a sweep may be writing while they read: they see whole files, and at most a
torn last line of an appended one). Hydra writes its own files (`.hydra/`, the job's log) before
evaluate takes the lock: a refused second run still rewrites `.hydra/` and logs its refusal. The lock
is advisory: it stops a second evaluate, not a hand edit, and on a network file system it is only
as good as that system's `flock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import shlex
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from diversed.errors import ConfigError
from diversed.files.atomic import write_file

LOCK_NAME = ".lock"
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


# ----------------------------------------------------------------------------- JSON lines


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


def read_jsonl(path: str | Path, take: Callable[[Any], Any] | None = None) -> list[Any]:
    """The JSON lines of a file as `take(value)` returns them (a ValueError from it: the line is not
    one). A torn last line (a crash) is skipped silently; every other line that cannot be read or taken
    is skipped and named (line number and why) in one warning."""
    rows, bad = [], []
    data = Path(path).read_bytes()
    n_complete = data.count(b"\n")  # a line after the last newline is torn
    for i, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except UnicodeDecodeError:
            bad.append((i, "not UTF-8"))
            continue
        except json.JSONDecodeError:
            if i < n_complete:  # a torn last line is expected after a crash, a bad complete one is not
                bad.append((i, "not JSON"))
            continue
        try:
            rows.append(value if take is None else take(value))
        except ValueError as e:
            bad.append((i, str(e)))
    skipped(path, [f"line {i + 1}: {why}" for i, why in bad])
    return rows


def skipped(path: str | Path, bad: list[str], what: str = "line") -> None:
    """One warning naming what a reader skipped in `path` (each "line 3: why"; the first ten)."""
    if bad:
        named = "; ".join(bad[:10]) + (f"; {len(bad) - 10} more" if len(bad) > 10 else "")
        warnings.warn(
            f"{path}: skipping {len(bad)} unreadable {what}{'s' * (len(bad) > 1)} ({named})", stacklevel=3
        )


# ----------------------------------------------------------------------------- the writer's lock


@contextlib.contextmanager
def hold(run_dir: str | Path) -> Iterator[bool]:
    """Hold `run_dir`'s lock while the block runs (True), or give False where the directory cannot
    be written (read-only: nothing may be written there). ConfigError, naming the holder and what to
    do, when another process holds it."""
    run_dir = Path(run_dir)
    lock = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if e.errno not in _READ_ONLY:
            raise
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{run_dir} is being written by another process ({_holder(lock)}); one writer at "
                "a time: wait for it to finish (then run again: it resumes from what that run "
                "wrote), or give this run another directory (paths.output_dir=... or "
                "hydra.run.dir=...)"
            ) from None
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": shlex.join(sys.orig_argv),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        yield True
    finally:
        os.close(fd)  # releases the lock (the kernel does the same when the process is killed)


def _holder(lock: Path) -> str:
    """Who holds `lock`, as it wrote itself into the file."""
    try:
        me = json.loads(lock.read_bytes())
        return f"pid {me['pid']} on {me['host']}, since {me['since']}: {me['command']}"
    except (OSError, ValueError, TypeError, KeyError):  # it has the lock but has not written itself yet
        return f"it has not said who it is yet: see {lock}"


# ----------------------------------------------------------------------------- settings and configs


def read_json(path: str | Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None with a warning naming the file and why it cannot be read."""
    try:
        body = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON (a torn or empty file)
        warnings.warn(f"{path}: cannot be read, left out ({type(e).__name__}: {e})", stacklevel=2)
        return None
    if not isinstance(body, dict):
        warnings.warn(f"{path}: holds a JSON {type(body).__name__}, not an object; left out", stacklevel=2)
        return None
    return body


def _parses(path: Path, load: Callable[[bytes], Any]) -> bool:
    try:
        return bool(load(path.read_bytes()))
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8, not JSON
        return False


def keep_settings(
    run_dir: str | Path, digest: str, settings: dict[str, Any], config: Callable[[], str]
) -> None:
    """Write `settings/<digest>.json` and `configs/<digest>.yaml` (`config()`: the resolved config's YAML)
    unless a readable one is there: what made a fingerprint's records is never replaced by another run's,
    and a torn one is written again."""
    run_dir = Path(run_dir)
    for path, load, text in (
        (
            run_dir / "settings" / f"{digest}.json",
            json.loads,
            lambda: json.dumps(settings, indent=1, default=str) + "\n",
        ),
        (run_dir / "configs" / f"{digest}.yaml", yaml.safe_load, config),
    ):
        if not (path.exists() and _parses(path, load)):
            write_file(path, text())
