"""Files and directories written whole or not at all, and never through a symbolic link: what
diversed leaves on disk (a run directory's records, examples, settings and report; checkpoints, the
exported head and draft) after a kill or a full disk is the previous version or nothing, never a part.

- `write_file(path, data)`: `data` (bytes, text, or a function writing a binary file object) to a
  temporary file beside `path` (`.<name>.tmp-<pid>`, or `.<name>.tmp-<pid>-<n>` where that name is
  taken), fsynced, then renamed over `path` (atomic on one filesystem); the directory is fsynced too.
  `write_all(fd, data)` is the single place bytes reach a file (tests replace it to fill the disk or
  die halfway).
- `write_directory(path, fill)`: `fill(tmp)` writes a whole directory beside `path`; its files are
  fsynced, then it takes `path`'s place (the previous one is moved aside first and deleted last: a
  kill between the two renames leaves it as `.<name>.old-<pid>`, never a mix of both).
- `open_plain(path, flags)`: a file opened for writing in place (the run directory's lock, the
  records appended to or repaired), never through a symbolic link and only if it is a regular file.
- On any error the temporary file or directory is removed; a full disk (ENOSPC, EDQUOT) is a
  `DiskFull` naming the directory, what was being written and that the previous version is intact.
- `remove_stale(directory)`: temporary files and directories left by a process that was killed
  while writing (its pid no longer runs).

Symbolic links: every name is opened relative to its directory's descriptor (`dir_fd`) with
`O_NOFOLLOW`. A temporary file is created with `O_CREAT | O_EXCL | O_NOFOLLOW` (a temporary directory
with `mkdir`, which never follows): whatever sits at its name (a planted link, another writer's file)
is never written through or truncated; the next free name is taken instead. Where `path` itself is
a link, the rename replaces the link (its target is left as it was); `open_plain` refuses one with
`NotAPlainFile`, which names it and says to remove it. The directories on the way (a run directory
linked to scratch space) are followed: they are the user's choice, not a file's.

It does not decide what is written (Lightning's checkpoint, `heads.py`, transformers' `save_pretrained`),
and a reader of such files still checks them (`preflight.py`): files from elsewhere can be cut short.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from diversed.errors import UserError

_FULL = (errno.ENOSPC, errno.EDQUOT)
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)(?:-\d+)?$")
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_TRIES = 100  # names tried for a temporary file or directory before giving up


class DiskFull(UserError, OSError):
    """The disk (or quota) holding a run directory is full: the message names the directory."""


class NotAPlainFile(UserError, OSError):
    """A file diversed writes in place is a symbolic link (or a FIFO, a device, a directory): it is
    not written through; the message names it, what it is, and says to remove it."""


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Every byte of `data` to `fd`: the single place bytes reach a file written here (tests replace it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Make `path` durable: a directory's new or renamed entries, or a file's bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
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


# ----------------------------------------------------------------------------- names in a directory


@contextlib.contextmanager
def _directory(path: Path) -> Iterator[int]:
    """`path`'s parent, created if missing, open as a descriptor for the `dir_fd=` calls below."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _refused(path: Path, st: os.stat_result | None) -> NotAPlainFile:
    """The error for `path`, which is no regular file (`st`: its lstat)."""
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            what = f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            what = "a symbolic link"
    else:
        kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
        what = next((k for test, k in kinds.items() if st is not None and test(st.st_mode)), "a device")
    how = f"rm -r {path}" if what == "a directory" else f"rm {path}"
    return NotAPlainFile(
        errno.ELOOP if "link" in what else errno.EINVAL,
        f"{path} is {what}, not a plain file; diversed writes it in place and never through a link or "
        f"into anything else: remove it ({how}) and run again",
    )


def open_plain(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """A descriptor of the regular file `path` (`os.open` flags, e.g. O_RDWR | O_CREAT), opened without
    following a symbolic link (relative to its directory's descriptor); NotAPlainFile where `path` is a
    link (a dangling one too) or no regular file. It does not take a lock or check who owns the file."""
    path = Path(path)
    with _directory(path) as dir_fd:
        try:
            # O_NONBLOCK: a FIFO there fails to open (ENXIO) or is refused below instead of hanging
            fd = os.open(path.name, flags | _NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=dir_fd)
        except OSError as e:
            st = _lstat(path.name, dir_fd)
            if st is not None and (stat.S_ISLNK(st.st_mode) or e.errno in (errno.ENXIO, errno.EISDIR)):
                raise _refused(path, st) from None
            raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refused(path, st)
    os.set_blocking(fd, True)
    return fd


def _temp_names(name: str, kind: str) -> Iterator[str]:
    """`.<name>.<kind>-<pid>`, then `.<name>.<kind>-<pid>-1`, ... (what `remove_stale` recognises)."""
    base = f".{name}.{kind}-{os.getpid()}"
    yield base
    for n in range(1, _TRIES):
        yield f"{base}-{n}"


def _no_free_name(path: Path, kind: str) -> OSError:
    return OSError(
        errno.EEXIST,
        f"cannot write {path}: the names of its temporary {'file' if kind == 'tmp' else 'directory'} "
        f"(.{path.name}.{kind}-{os.getpid()}, -1, ... -{_TRIES - 1}) are all taken in {path.parent}; "
        "remove them and run again",
    )


def _new_file(path: Path, dir_fd: int) -> tuple[str, int]:
    """A temporary file beside `path`, created (O_EXCL: nothing that was there is opened): its name, fd."""
    for name in _temp_names(path.name, "tmp"):
        try:
            return name, os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise _no_free_name(path, "tmp")


def _remove(name: str, dir_fd: int, parent: Path) -> None:
    """Remove the entry `name` (a directory with its content; a link itself, never its target)."""
    st = _lstat(name, dir_fd)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(parent / name, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


# ----------------------------------------------------------------------------- writing


def write_file(
    path: str | os.PathLike[str], data: bytes | memoryview | str | Callable[[BinaryIO], object]
) -> Path:
    """`data` as the whole content of `path`, or `path` unchanged (see the module docstring): bytes,
    text (UTF-8), or a function that writes a binary file (`lambda f: fig.savefig(f, format="png")`).
    A link at `path` is replaced by the file (its target is not written); nothing at the temporary
    file's name is opened."""
    path = Path(path)
    with _directory(path) as dir_fd:
        tmp, fd = _new_file(path, dir_fd)
        try:
            try:
                if callable(data):
                    with os.fdopen(os.dup(fd), "wb") as f:
                        data(f)
                else:
                    write_all(fd, data.encode() if isinstance(data, str) else data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as e:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)  # the file this call created, by the name it took
            if _full(e):
                raise _disk_full(e, path) from e
            raise
        os.fsync(dir_fd)
    return path


def write_directory(path: str | os.PathLike[str], fill: Callable[[Path], object]) -> Path:
    """The directory `fill(tmp)` writes, in `path`'s place, or `path` unchanged (module docstring).
    A link at `path` is replaced (moved aside, then removed: its target is left as it was)."""
    path = Path(path)
    with _directory(path) as dir_fd:
        for tmp in _temp_names(path.name, "tmp"):
            try:
                os.mkdir(tmp, 0o755, dir_fd=dir_fd)  # a new directory: nothing planted there is filled
                break
            except FileExistsError:
                continue
        else:
            raise _no_free_name(path, "tmp")
        old = None
        try:
            fill(path.parent / tmp)
            for file in sorted((path.parent / tmp).rglob("*")):
                if file.is_file() and not file.is_symlink():
                    fsync_path(file)
            fsync_path(path.parent / tmp)
            if _lstat(path.name, dir_fd) is not None:
                old = next((n for n in _temp_names(path.name, "old") if _lstat(n, dir_fd) is None), None)
                if old is None:
                    raise _no_free_name(path, "old")
                os.rename(path.name, old, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as e:
            _remove(tmp, dir_fd, path.parent)
            if old is not None and _lstat(path.name, dir_fd) is None:
                os.rename(old, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # the previous one back
            if _full(e):
                raise _disk_full(e, path) from e
            raise
        os.fsync(dir_fd)
        if old is not None:
            _remove(old, dir_fd, path.parent)
    return path


def remove_stale(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files and directories of writers that no longer run (killed while
    writing) from `directory`; returns what was removed (a link by that name: the link itself)."""
    removed = []
    for entry in sorted(Path(directory).glob(".*")) if Path(directory).is_dir() else []:
        match = _TEMP.match(entry.name)
        if match is None or _running(int(match["pid"])):
            continue
        if entry.is_dir() and not entry.is_symlink():
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
