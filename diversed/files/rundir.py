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
  `unheld_lock(path)` says whether a lock file is one no process holds (a refused run's cleanup,
  `jobs.LeaveNothingWhenRefused`, removes only such a lock).
- `keep_settings(run_dir, digest, settings, config)`: `settings/<digest>.json` and
  `configs/<digest>.yaml`, written once; a file that does not parse (torn by an older version's
  plain write) is written again.
- `json_line(row)`: a row as a strict JSON line; `iter_jsonl(path, take)` (and `read_jsonl`, its
  list): the lines of a file that `take` accepts, read one at a time (the file is never held whole),
  every other named in one warning with its line number and why: not UTF-8; not JSON, for any reason
  the parser gives (a 5,000-digit integer, nesting too deep for it, ...); an integer beyond 64 bits,
  nesting deeper than `MAX_DEPTH`, a lone surrogate (text no file or terminal can hold); longer than
  `MAX_LINE_BYTES` (skipped in chunks, never held whole); or refused by `take` (why it says). A torn
  last line (no newline: a kill leaves it) that does not parse is skipped silently. `skipped(path,
  bad)` is that warning (also for the rows of a table file).
- `read_json(path)`: a JSON object file, or None with a warning naming the file and why (any parse
  failure; larger than `MAX_LINE_BYTES`).
- The writer's files are opened without following symbolic links (`atomic.open_plain`, `write_file`):
  a `.lock` that is a link is refused (`atomic.NotAPlainFile`, naming it and the fix), and so is a
  results.jsonl the store would cut or append to (`results.py`); a link where a whole file is written
  (examples, settings, configs, a report's files) is replaced, its target left alone. Readers follow
  links (a results file linked from elsewhere is read), but read no FIFO (it would block).

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
import re
import shlex
import socket
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from diversed.errors import ConfigError, UserError
from diversed.files.atomic import open_plain, write_file

LOCK_NAME = ".lock"
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)

# A line (or a JSON file) longer than this is skipped unread: a record is a few KB, an examples row with
# per-token lists well under 1 MB. Reading one at the cap takes a few times the cap (bytes, text, values).
MAX_LINE_BYTES = 64 * 2**20
MAX_DEPTH = 100  # nesting a line may have (records: 3): deeper would break pandas or json.dumps downstream
_CHUNK = 2**20  # bytes read at a time (a line longer than this is gathered, or skipped, chunk by chunk)
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # a JSON escape of a surrogate: check the pair
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # strings (skipped), brackets (counted)


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


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def _int(digits: str) -> int:
    """A JSON integer within 64 bits (pandas and Parquet hold no more); ValueError beyond."""
    if len(digits) > 21 or not -(2**64) < (value := int(digits)) < 2**64:
        raise ValueError(f"an integer of {len(digits.lstrip('-'))} digits, beyond 64 bits")
    return value


_DECODER = json.JSONDecoder(parse_int=_int)  # (one decoder: json.loads(..., parse_int=) makes one per call)


def _depth(text: str) -> int:
    """How deep the arrays and objects of the JSON `text` nest (brackets inside strings not counted)."""
    depth = deepest = 0
    for m in _STRUCTURE.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def parse_line(line: bytes, *, first: bool = False) -> Any:
    """The JSON value of one line (UTF-8, strict JSON plus NaN/Infinity as Python reads them); ValueError
    saying why it is none: not UTF-8, deeper than `MAX_DEPTH`, an integer beyond 64 bits, a lone surrogate,
    or any failure of the parser (its type and message). `first`: a UTF-8 byte order mark may start it.
    It does not check what the value holds (that is `take`'s)."""
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if first and text.startswith("\ufeff"):
        text = text[1:]
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    try:
        value = _DECODER.decode(text)
    except ValueError as e:
        # JSONDecodeError, or the parser's own limit (Python's 4,300 digits) or _int's
        raise ValueError("not JSON" if isinstance(e, json.JSONDecodeError) else f"not JSON ({e})") from None
    except Exception as e:  # RecursionError, MemoryError, ...: any line the parser cannot take is not one
        raise ValueError(f"not JSON ({type(e).__name__}: {e})") from None
    if "\\u" in text and _SURROGATE.search(text):  # a pair is text, a lone surrogate cannot be written out
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate (\\udXXX) in a string: not text") from None
    return value


def _lines(f: Any) -> Iterator[tuple[int, bytes | None, bool]]:
    """(line number from 1, the line or None where longer than `MAX_LINE_BYTES`, whether a newline ends
    it) for each line of the binary file `f`, read `_CHUNK` bytes at most at a time: a line over the cap
    is read past, never held whole."""
    number = 0
    while line := f.readline(_CHUNK):
        number += 1
        if line.endswith(b"\n") and len(line) <= MAX_LINE_BYTES + 1:  # the common case: one read
            yield number, line, True
            continue
        parts, size = [line], len(line)
        while size <= MAX_LINE_BYTES and not parts[-1].endswith(b"\n") and (part := f.readline(_CHUNK)):
            parts.append(part)
            size += len(part)
        ended = parts[-1].endswith(b"\n")
        if size - ended <= MAX_LINE_BYTES:
            yield number, b"".join(parts), ended
            continue
        parts.clear()  # over the cap: dropped, the rest read past chunk by chunk
        while not ended and (part := f.readline(_CHUNK)):
            ended = part.endswith(b"\n")
        yield number, None, ended


def _shared(row: dict[str, Any], memo: dict[str, str]) -> dict[str, Any]:
    """`row` with its field names and short text values the same objects as the equal ones of the rows
    before it (`memo`): a file of a million records holds each name once, not a million times (the
    parser shares them within one line only). Nested values are left as they are."""
    return {
        memo.setdefault(k, k): memo.setdefault(v, v) if type(v) is str and len(v) <= 64 else v
        for k, v in row.items()
    }


def _open_regular(path: Path) -> Any:
    """`path` open for binary reading (links followed), or None with a warning where it is no regular
    file (a FIFO there would block the reader)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        warnings.warn(f"{path}: not a regular file; left out", stacklevel=4)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=_CHUNK)


def iter_jsonl(path: str | Path, take: Callable[[Any], Any] | None = None) -> Iterator[Any]:
    """The JSON lines of a file as `take(value)` returns them, one line read at a time (module docstring).
    A line `take` raises on (ValueError: it says why it is not one; any other exception: its type and
    message) is skipped. A torn last line that does not parse is skipped silently; every other line that
    cannot be read or taken is named (line number and why) in one warning, once the file is read.
    It never holds the file, or a line over `MAX_LINE_BYTES`, whole."""
    path = Path(path)
    f = _open_regular(path)
    if f is None:
        return
    named: list[str] = []
    count = 0
    memo: dict[str, str] = {}

    def bad(number: int, why: str) -> None:
        nonlocal count
        count += 1
        if len(named) < 10:
            named.append(f"line {number}: {why if len(why) <= 200 else why[:199] + '…'}")

    with f:
        for number, line, ended in _lines(f):
            if line is None:
                bad(number, f"longer than {_size(MAX_LINE_BYTES)}, not read")
                continue
            if not line.strip():
                continue
            try:
                value = parse_line(line, first=number == 1)
            except ValueError as e:
                if ended:  # a torn last line is expected after a crash, a bad complete one is not
                    bad(number, str(e))
                continue
            if type(value) is dict:
                value = _shared(value, memo)
            if take is not None:
                try:
                    value = take(value)
                except ValueError as e:
                    bad(number, str(e))
                    continue
                except Exception as e:  # a line no check foresaw: skipped and named all the same
                    bad(number, f"{type(e).__name__}: {e}")
                    continue
            yield value
    skipped(path, named, total=count)


def read_jsonl(path: str | Path, take: Callable[[Any], Any] | None = None) -> list[Any]:
    """`iter_jsonl` as a list."""
    return list(iter_jsonl(path, take))


def skipped(path: str | Path, bad: list[str], what: str = "line", total: int | None = None) -> None:
    """One warning naming what a reader skipped in `path` (each "line 3: why"; the first ten of `bad`,
    which holds `total` of them, default all)."""
    total = len(bad) if total is None else total
    if total:
        named = "; ".join(bad[:10]) + (f"; {total - min(len(bad), 10)} more" if total > 10 else "")
        warnings.warn(
            f"{path}: skipping {total} unreadable {what}{'s' * (total > 1)} ({named})", stacklevel=3
        )


# ----------------------------------------------------------------------------- the writer's lock


@contextlib.contextmanager
def hold(run_dir: str | Path) -> Iterator[bool]:
    """Hold `run_dir`'s lock while the block runs (True), or give False where the directory cannot
    be written (read-only: nothing may be written there). ConfigError, naming the holder and what to
    do, when another process holds it; `atomic.NotAPlainFile` where `.lock` is a symbolic link (or no
    regular file): its target is never truncated or written."""
    run_dir = Path(run_dir)
    lock = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = open_plain(lock, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        if e.errno not in _READ_ONLY or isinstance(e, UserError):
            raise
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{run_dir} is being written by another process ({_holder(fd, lock)}); one writer at "
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


def unheld_lock(path: str | Path) -> bool:
    """Whether `path` is a run directory's lock file (`hold`: named LOCK_NAME, a plain file, not a
    link) that no process holds (probed without waiting; the probe's own lock goes with it)."""
    path = Path(path)
    if path.name != LOCK_NAME or path.is_symlink() or not path.is_file():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _holder(fd: int, lock: Path) -> str:
    """Who holds `lock` (open as `fd`), as it wrote itself into the file (its first 64 KiB)."""
    try:
        me = json.loads(os.pread(fd, 2**16, 0))
        return f"pid {me['pid']} on {me['host']}, since {me['since']}: {me['command']}"
    except Exception:  # it has the lock but has not written itself yet (or the file is not its JSON)
        return f"it has not said who it is yet: see {lock}"


# ----------------------------------------------------------------------------- settings and configs


def _small_file(path: Path) -> bytes:
    """The bytes of the regular file `path` (links followed); ValueError where it is larger than
    `MAX_LINE_BYTES` or no regular file (a FIFO would block), OSError where it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        os.set_blocking(fd, True)
        data = f.read(MAX_LINE_BYTES + 1) if st.st_size <= MAX_LINE_BYTES else b""
        if st.st_size > MAX_LINE_BYTES or len(data) > MAX_LINE_BYTES:
            raise ValueError(f"more than {_size(MAX_LINE_BYTES)}")
        return data


def read_json(path: str | Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None with a warning naming the file and why it cannot be read (any
    failure of the parser too: a RecursionError, a 5,000-digit integer)."""
    try:
        body = json.loads(_small_file(Path(path)))
    except Exception as e:  # not UTF-8, not JSON (a torn or empty file), too large, too deep, ...
        why = str(e) if len(str(e)) <= 200 else str(e)[:199] + "…"
        warnings.warn(f"{path}: cannot be read, left out ({type(e).__name__}: {why})", stacklevel=2)
        return None
    if not isinstance(body, dict):
        warnings.warn(f"{path}: holds a JSON {type(body).__name__}, not an object; left out", stacklevel=2)
        return None
    return body


def _parses(path: Path, load: Callable[[bytes], Any]) -> bool:
    try:
        return bool(load(_small_file(path)))
    except Exception:  # not UTF-8, not JSON or YAML, too large, too deep for the parser, ...
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
