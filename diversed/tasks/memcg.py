"""A memory cgroup for each sandboxed program: everything it holds counted and capped together.

RLIMIT_AS caps a program's address space only; memory the kernel holds on its behalf (memfd and tmpfs
pages, pipe buffers, inodes and dentries, SysV shared memory) is outside it. A memory cgroup counts
all of that: `MemoryGroup.for_program(limit)` makes one under the caller's own cgroup, the program's
first process enters it between fork and exec (`enter`), so every process it starts is in it too,
and past the limit the kernel's OOM killer acts inside the group, not on the caller.

Where a group can be made (probed once per process, `where`):
- cgroup v1 (a `memory` hierarchy): under the caller's memory cgroup, if this user may write there
  (root, or a cgroup delegated to it). Limits: memory.limit_in_bytes and memory.memsw.limit_in_bytes.
- cgroup v2: under the caller's cgroup if it hands `memory` to its children, or if it may (the
  controller is there, the directory is writable, e.g. `systemd-run --user --scope -p Delegate=yes`)
  and the caller is the cgroup's only process: then the caller first moves itself into a child
  `diversed-caller` (v2 keeps processes out of cgroups that hand controllers down). Limits: memory.max,
  memory.swap.max 0.
Elsewhere (an unprivileged user without delegation, not Linux) `where` says why not, `available`
warns once, and the caller falls back on its other bounds (execution.py says which).

Not done here: choosing the limit (the caller passes it), killing the program (the monitor and the
caller do; cgroup.kill is used only as a last sweep before the group is removed).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

_PREFIX = "diversed-"
_counter = itertools.count()
_lock = threading.Lock()
_where: list[tuple[Path, int] | str] = []  # [(parent directory, cgroup version)] or [why not], once probed
_warned: list[bool] = []


def where() -> tuple[Path, int] | str:
    """(directory the groups are made in, cgroup version 1 or 2), or why none can be made here."""
    with _lock:
        if not _where:
            try:
                found = _find(Path("/proc/self/cgroup"), Path("/proc/self/mountinfo"))
                if isinstance(found, tuple):
                    _sweep(found[0])
                    with MemoryGroup.make(*found, 64 << 20) as group:  # a process must really enter one
                        command = [sys.executable, "-I", "-S", "-c", ""]
                        subprocess.run(command, preexec_fn=group.enter, check=True, timeout=60)
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                found = f"cannot make one here: {e}"
            _where.append(found)
        return _where[0]


def _find(cgroups: Path, mountinfo: Path) -> tuple[Path, int] | str:
    """From /proc/self/cgroup and /proc/self/mountinfo: where groups are made, as `where` says."""
    if not cgroups.exists():
        return "no cgroups (not Linux)"
    own = {}  # hierarchy: the caller's cgroup path
    for line in cgroups.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own["v2" if controllers == "" else "memory" if "memory" in controllers.split(",") else "-"] = path
    mounts = {}
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, (fstype, _, options) = left.split(), right.split()[:3]
        if fstype == "cgroup2":
            mounts.setdefault("v2", (fields[3], fields[4]))
        elif fstype == "cgroup" and "memory" in options.split(","):
            mounts.setdefault("memory", (fields[3], fields[4]))
    for kind in ("memory", "v2"):
        if kind not in own or kind not in mounts:
            continue
        root, mountpoint = mounts[kind]
        if not (own[kind] + "/").startswith(root.rstrip("/") + "/"):
            continue  # the caller's cgroup is outside what is mounted here
        directory = Path(mountpoint + own[kind][len(root.rstrip("/")) :])
        if kind == "memory":
            return directory, 1
        if "memory" in (directory / "cgroup.controllers").read_text().split():
            return _delegate(directory), 2
    return "no memory controller in this process's cgroups"


def _delegate(directory: Path) -> Path:
    """cgroup v2: make `directory` hand `memory` to its children, moving the caller out of it first."""
    if "memory" in (directory / "cgroup.subtree_control").read_text().split():
        return directory
    if (directory / "cgroup.procs").read_text().split() != [str(os.getpid())]:
        raise PermissionError(f"{directory} holds other processes too: start the caller in a cgroup alone")
    leaf = directory / f"{_PREFIX}caller"
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(str(os.getpid()))
    (directory / "cgroup.subtree_control").write_text("+memory")
    return directory


def _sweep(parent: Path) -> None:
    """Remove the empty groups a caller killed before it could remove them left behind."""
    for path in parent.glob(f"{_PREFIX}*-*"):
        pid = path.name[len(_PREFIX) :].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                path.rmdir()
            except OSError:
                pass  # still in use, or not ours to remove


def available() -> bool:
    """Whether groups can be made here; where not, a RuntimeWarning (once per process) says what is open."""
    found = where()
    with _lock:
        if not isinstance(found, str) or _warned:
            return not isinstance(found, str)
        _warned.append(True)
    message = f"diversed sandbox: no memory cgroup ({found}): memory the kernel holds for a program (pipes, "
    message += "files in a scratch directory on tmpfs; memfd and SysV shared memory without seccomp) is "
    message += "bounded by how many files it can open, not by its memory limit."
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    return False


class MemoryGroup:
    """One program's cgroup: made with its limit, entered by the program's first process, removed after."""

    def __init__(self, path: Path, version: int, procs_fd: int) -> None:
        self.path, self.version, self.procs_fd = path, version, procs_fd

    @classmethod
    def for_program(cls, limit_bytes: int) -> AbstractContextManager[MemoryGroup | None]:
        """A group capped at `limit_bytes`, as a context that removes it; None where `available` is False."""
        return cls.make(*where(), limit_bytes) if available() else nullcontext()

    @classmethod
    def make(cls, parent: Path, version: int, limit_bytes: int) -> MemoryGroup:
        path = parent / f"{_PREFIX}{os.getpid()}-{next(_counter)}"
        path.mkdir()
        try:
            if version == 1:  # memsw (memory + swap) only where swap accounting is on; it must not be < limit
                settings = {"memory.limit_in_bytes": limit_bytes, "memory.memsw.limit_in_bytes": limit_bytes}
            else:
                settings = {"memory.max": limit_bytes, "memory.swap.max": 0}
            for name, value in settings.items():
                if (path / name).exists():
                    (path / name).write_text(str(value))
            return cls(path, version, os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except BaseException:
            path.rmdir()
            raise

    def __enter__(self) -> MemoryGroup:
        return self

    def __exit__(self, *_: object) -> None:
        self.remove()

    def enter(self) -> None:
        """Move the calling process into the group (a `preexec_fn`: between fork and exec, no locks)."""
        os.write(self.procs_fd, b"0")

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this group for going over its limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Kill what is left in it (v2) and remove it; one still busy after a second is left to `_sweep`."""
        os.close(self.procs_fd)
        try:
            if (self.path / "cgroup.kill").exists():
                (self.path / "cgroup.kill").write_text("1")
        except OSError:
            pass
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except OSError:  # EBUSY: a killed process is still exiting
                time.sleep(0.01)
