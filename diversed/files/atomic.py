"""Files and directories written whole or not at all: what diversed leaves on disk (a run directory's
records, examples, settings and report; checkpoints, the exported head and draft) after a kill or a
full disk is the previous version or nothing, never a part.

- `write_file(path, data)`: `data` (bytes, text, or a function writing a binary file object) to a
  temporary file beside `path` (`.<name>.tmp-<pid>`), fsynced, then renamed over `path` (atomic on
  one filesystem); the directory is fsynced too (`fsync_path`). `write_all(fd, data)` is the single
  place bytes reach a file (tests replace it to fill the disk or die halfway).
- `write_directory(path, fill)`: `fill(tmp)` writes a whole directory beside `path`; its files are
  fsynced, then it takes `path`'s place (the previous one is moved aside first and deleted last: a
  kill between the two renames leaves it as `.<name>.old-<pid>`, never a mix of both).
- On any error the temporary file or directory is removed; a full disk (ENOSPC, EDQUOT) is a
  `DiskFull` naming the directory, what was being written and that the previous version is intact.
- `remove_stale(directory)`: temporary files and directories left by a process that was killed
  while writing (its pid no longer runs).

It does not decide what is written (Lightning's checkpoint, `heads.py`, transformers' `save_pretrained`),
and a reader of such files still checks them (`preflight.py`): files from elsewhere can be cut short.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from diversed.errors import UserError

_FULL = (errno.ENOSPC, errno.EDQUOT)
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)$")


class DiskFull(UserError, OSError):
    """The disk (or quota) holding a run directory is full: the message names the directory."""


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Every byte of `data` to `fd`: the single place bytes reach a file written here (tests replace it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Make `path` durable: a directory's new or renamed entries, or a file's bytes."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _full(e: BaseException) -> bool:
    while e is not None:
        if isinstance(e, OSError) and e.errno in _FULL:
            return True
        e = e.__cause__ or e.__context__  # transformers or torch may wrap the OSError
    return False


def _disk_full(e: BaseException, path: Path) -> DiskFull:
    resume = (
        f" (training resumes with ckpt_path={path.parent / 'last.ckpt'})" if path.suffix == ".ckpt" else ""
    )
    return DiskFull(
        e.errno if isinstance(e, OSError) and e.errno in _FULL else errno.ENOSPC,
        f"the disk holding {path.parent} is full (no space left writing {path.name}); nothing was "
        f"left half-written and the previous {path.name}, if any, is intact: free space there, or move "
        f"the run directory, and run again{resume}",
    )


def write_file(
    path: str | os.PathLike[str], data: bytes | memoryview | str | Callable[[BinaryIO], object]
) -> Path:
    """`data` as the whole content of `path`, or `path` unchanged (see the module docstring): bytes,
    text (UTF-8), or a function that writes a binary file (`lambda f: fig.savefig(f, format="png")`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if callable(data):
                with os.fdopen(os.dup(fd), "wb") as f:
                    data(f)
            else:
                write_all(fd, data.encode() if isinstance(data, str) else data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if _full(e):
            raise _disk_full(e, path) from e
        raise
    fsync_path(path.parent)
    return path


def write_directory(path: str | os.PathLike[str], fill: Callable[[Path], object]) -> Path:
    """The directory `fill(tmp)` writes, in `path`'s place, or `path` unchanged (module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = (path.with_name(f".{path.name}.{kind}-{os.getpid()}") for kind in ("tmp", "old"))
    shutil.rmtree(tmp, ignore_errors=True)
    moved = False
    try:
        tmp.mkdir()
        fill(tmp)
        for file in sorted(tmp.rglob("*")):
            if file.is_file():
                fsync_path(file)
        fsync_path(tmp)
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
            moved = True
        os.rename(tmp, path)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if moved and not path.exists():
            os.rename(old, path)  # the previous directory back in its place
        if _full(e):
            raise _disk_full(e, path) from e
        raise
    fsync_path(path.parent)
    shutil.rmtree(old, ignore_errors=True)
    return path


def remove_stale(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files and directories of writers that no longer run (killed while
    writing) from `directory`; returns what was removed."""
    removed = []
    for entry in sorted(Path(directory).glob(".*")) if Path(directory).is_dir() else []:
        match = _TEMP.match(entry.name)
        if match is None or _running(int(match["pid"])):
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
