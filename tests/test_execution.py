"""diversed/tasks/execution.py: verdicts, output, timeouts and the layer switches. The hostile programs
and what each layer closes are in test_sandbox.py."""

from __future__ import annotations

import os
import resource
import warnings
from pathlib import Path

import pytest

from diversed.tasks import confine, execution, memcg
from diversed.tasks.execution import ExecutionResult, run_program, run_programs

TIMEOUT = 3.0

CORRECT = "def add(a, b):\n    return a + b\n\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
STDLIB = (  # what MBPP solutions import, and more, with 20 files open: RLIMIT_NOFILE leaves room for it
    "import abc, argparse, array, ast, bisect, collections, copy, csv, dataclasses, datetime, decimal\n"
    "import difflib, email.message, enum, fractions, functools, hashlib, heapq, inspect, io, itertools\n"
    "import json, logging, math, operator, pathlib, pprint, random, re, statistics, string, struct, zlib\n"
    "import tempfile, textwrap, tokenize, traceback, typing, unittest, urllib.parse, xml.etree.ElementTree\n"
    "files = [open(f'f{i}', 'w') for i in range(20)]\n"
)


@pytest.fixture(scope="module")
def batch() -> dict[str, ExecutionResult]:
    programs = {
        "correct": CORRECT,
        "report_parent": "import os\nprint('parent', os.getppid())\n",
        "runs_like_a_script": (  # its own __main__ module, so pickle and typing find its classes
            "import dataclasses, pickle, typing\n@dataclasses.dataclass\nclass P:\n    x: int\n\n"
            "assert pickle.loads(pickle.dumps(P(1))) == P(1)\nassert typing.get_type_hints(P) == {'x': int}\n"
        ),
        "wrong_answer": "def add(a, b):\n    return a - b\n\nassert add(1, 2) == 3\n",
        "syntax_error": "def add(a, b)\n    return a + b\n",
        "guarded": "import os\nos.kill(1, 9)\n",
        "sleeps": "import time\ntime.sleep(60)\n",
        "print_100mb": "print('x' * 100_000_000)\n",
        "exit_code_3": "import os\nos._exit(3)\n",
        "stdlib_and_open_files": STDLIB,
        "too_many_open_files": "files = [open(f'f{i}', 'w') for i in range(100)]\n",
        "lone_surrogate": "x = '\udcff'\n",  # one bad program fails alone; the batch is scored
    }
    return dict(zip(programs, run_programs(programs.values(), timeout=TIMEOUT), strict=True))


def test_correct_programs_pass(batch: dict) -> None:
    for name in ("correct", "report_parent", "runs_like_a_script", "stdlib_and_open_files"):
        r = batch[name]
        assert r.passed and r.status == "passed" and r.returncode == 0, (name, r)
    assert int(batch["report_parent"].output.split()[1]) != os.getpid()  # the monitor, never the caller


def test_errors_and_output_are_reported(batch: dict) -> None:
    assert "AssertionError" in batch["wrong_answer"].output and not batch["wrong_answer"].passed
    assert "SyntaxError" in batch["syntax_error"].output
    assert "disabled in the diversed sandbox" in batch["guarded"].output
    assert batch["exit_code_3"].returncode == 3 and batch["exit_code_3"].status == "failed"
    big = batch["print_100mb"]
    assert not big.passed and 0 < len(big.output) <= execution.OUTPUT_BYTES
    assert "Too many open files" in batch["too_many_open_files"].output
    surrogate = batch["lone_surrogate"]
    assert surrogate.status == "failed" and "did not run" in surrogate.output
    assert "'\\udcff'" in surrogate.output


def test_timeout(batch: dict) -> None:
    r = batch["sleeps"]
    assert r.status == "timeout" and not r.passed and r.returncode == -9
    assert r.seconds < TIMEOUT + execution.BACKSTOP_S


def test_sentinel_requires_running_to_the_end() -> None:
    # A program that prints a look-alike of the sentinel line still fails if it exits early.
    r = run_program("print('\\n' + 'f' * 32)\nimport os\nos._exit(0)\n", timeout=TIMEOUT)
    assert not r.passed and r.returncode == 0


MEMFD = "import os\nfds = [os.memfd_create('x') for _ in range(24)]\nfor fd in fds:\n    {fill}\n"


def test_a_memory_cgroup_caps_what_the_kernel_holds_for_a_program() -> None:
    # 24 memfds of 15 MiB: outside RLIMIT_AS and within RLIMIT_NOFILE, over the group's 192 MiB.
    # Landlock alone: seccomp would deny memfd_create before the group is reached.
    if isinstance(memcg.where(), str):
        pytest.skip(f"no memory cgroup here: {memcg.where()}")
    fills = ("os.posix_fallocate(fd, 0, 15 << 20)", "os.write(fd, bytes(15 << 20))")
    programs = [MEMFD.format(fill=fill) for fill in fills]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the layers switched off
        results = run_programs(
            [*programs, CORRECT, CORRECT], layers=["landlock"], memory_bytes=192 << 20, timeout=TIMEOUT
        )
    for r in results[:2]:
        assert r.status == "failed" and "went over its memory limit" in r.output, r
    assert [r.passed for r in results[2:]] == [True, True]
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
    assert grew < 32 << 10, "the caller's memory grew"


def test_memory_cgroups_are_found_in_v1_and_delegated_v2(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    cgroups, mountinfo = tmp_path / "cgroup", tmp_path / "mountinfo"
    mount = "35 31 0:32 {root} {point} rw,relatime - {fs} cgroup rw{opts}\n"
    cgroups.write_text("4:memory:/jobs/a\n1:cpu:/\n0::/user/app\n")
    mountinfo.write_text(mount.format(root="/", point="/cg/memory", fs="cgroup", opts=",memory"))
    assert memcg._find(cgroups, mountinfo) == (Path("/cg/memory/jobs/a"), 1)
    mountinfo.write_text(mount.format(root="/jobs", point="/cg/memory", fs="cgroup", opts=",memory"))
    assert memcg._find(cgroups, mountinfo) == (Path("/cg/memory/a"), 1)  # a mount of a sub-tree
    # v2: the caller's cgroup may hand `memory` down once the caller has moved into a child of it
    own = tmp_path / "v2" / "user" / "app"
    own.mkdir(parents=True)
    files = {"cgroup.controllers": "cpu memory", "cgroup.subtree_control": "", "cgroup.procs": "1 2"}
    for name, text in files.items():
        (own / name).write_text(text)
    cgroups.write_text("0::/user/app\n")
    mountinfo.write_text(mount.format(root="/", point=tmp_path / "v2", fs="cgroup2", opts=""))
    with pytest.raises(PermissionError, match="holds other processes too"):
        memcg._find(cgroups, mountinfo)
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n")
    assert memcg._find(cgroups, mountinfo) == (own, 2)
    assert (own / "diversed-caller" / "cgroup.procs").read_text() == str(os.getpid())
    assert (own / "cgroup.subtree_control").read_text() == "+memory"
    (own / "cgroup.controllers").write_text("cpu")
    assert "no memory controller" in memcg._find(cgroups, mountinfo)


def test_run_programs_keeps_order_and_handles_empty() -> None:
    assert run_programs([]) == []
    results = run_programs(["assert True\n", "assert False\n", "assert 1\n"], workers=2, timeout=TIMEOUT)
    assert [r.passed for r in results] == [True, False, True]


def test_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(execution.ALLOW_ENV, raising=False)
    assert not execution.code_execution_allowed()
    assert execution.code_execution_allowed(True)
    with pytest.raises(execution.CodeExecutionNotAllowed, match="DIVERSED_ALLOW_CODE_EXECUTION=1"):
        execution.require_code_execution(False, "this test")
    monkeypatch.setenv(execution.ALLOW_ENV, "1")
    execution.require_code_execution(False, "this test")


# ---------------------------------------------------------------- choosing and probing the layers


def test_requested_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(execution.LAYERS_ENV, raising=False)
    assert execution.requested_layers() == execution.LAYERS
    monkeypatch.setenv(execution.LAYERS_ENV, "seccomp, landlock")
    assert execution.requested_layers() == ("landlock", "seccomp")
    monkeypatch.setenv(execution.LAYERS_ENV, "none")
    assert execution.requested_layers() == ()
    assert execution.requested_layers(["bwrap"]) == ("bwrap",)  # the argument wins
    with pytest.raises(ValueError, match="unknown sandbox layers"):
        execution.requested_layers(["docker"])


def test_each_missing_layer_is_warned_about_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execution, "_probed", {"bwrap": "not here", "landlock": None, "seccomp": None})
    monkeypatch.setattr(execution, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = execution.sandbox_layers(["landlock", "bwrap"])
        execution.sandbox_layers(["landlock"])
    assert state == {
        "bwrap": "not here",
        "landlock": None,
        "seccomp": f"switched off by {execution.LAYERS_ENV}",
    }
    said = sorted(str(w.message).split(" not enforced")[0] for w in caught)
    assert said == ["diversed sandbox: bwrap", "diversed sandbox: seccomp"]
    assert "no PID/mount/network/IPC namespaces" in str(caught[0].message)


def test_probes_say_why_a_layer_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    assert "bubblewrap not found" in execution._probe_bwrap()
    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    assert "Landlock unavailable" in execution._probe_landlock()
    monkeypatch.setattr(execution, "_LINUX", False)
    assert (
        execution._probe_bwrap()
        == execution._probe_seccomp()
        == execution._probe_landlock()
        == "not on Linux"
    )


def _verdict(prog: list[tuple[int, int, int, int]], arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Run a seccomp BPF program (the instructions _seccomp_filter uses) on one system call."""
    data = {0: nr, 4: arch} | {16 + 8 * i: a & 0xFFFFFFFF for i, a in enumerate(args)}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:  # ld word at offset k of seccomp_data
            acc = data.get(k, 0)
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += jt if hit else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unknown instruction {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(confine.SECCOMP_ARCHES))
def test_seccomp_filter_allows_threads_and_denies_the_rest(machine: str) -> None:
    allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
    arch, column = confine.SECCOMP_ARCHES[machine]
    numbers = confine._syscalls(confine._DENY, column)
    clone, ioctl, fcntl = (
        confine._CLONE[column],
        confine._CHECKED["ioctl"][column],
        confine._CHECKED["fcntl"][column],
    )
    thread = 0x3D0F00  # glibc's pthread_create: CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|*TID
    for allow_delete in (False, True):
        prog = confine._seccomp_filter(machine, allow_delete)
        assert all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in prog)
        for name in (
            "execve",
            "setsid",
            "setpgid",
            "mount",
            "ptrace",
            "socket",
            "kill",
            "fchmodat",
            "memfd_create",
            "inotify_add_watch",
        ):
            assert _verdict(prog, arch, numbers[name]) == eperm, name
        if machine == "x86_64":
            assert _verdict(prog, arch, 0x40000000 + numbers["execve"]) == eperm  # x32 calls
        assert _verdict(prog, arch ^ 1, 0) == eperm  # another architecture's calls
        assert _verdict(prog, arch, clone, (thread,)) == allow  # a thread
        assert _verdict(prog, arch, clone, (17,)) == eperm  # fork: SIGCHLD, no CLONE_THREAD
        assert _verdict(prog, arch, clone, (thread | 0x40000000,)) == eperm  # with CLONE_NEWNET
        assert _verdict(prog, arch, confine._CLONE3, (0,)) == enosys  # glibc falls back on clone
        assert _verdict(prog, arch, ioctl, (3, 0x40086602)) == eperm  # FS_IOC_SETFLAGS
        assert _verdict(prog, arch, ioctl, (3, 0x40087602)) == eperm  # FS_IOC_SETVERSION
        assert _verdict(prog, arch, ioctl, (3, 0x541B)) == allow  # FIONREAD
        assert _verdict(prog, arch, fcntl, (3, 1024)) == eperm  # F_SETLEASE
        assert _verdict(prog, arch, fcntl, (3, 1026)) == eperm  # F_NOTIFY
        assert _verdict(prog, arch, fcntl, (3, 3)) == allow  # F_GETFL
        unlinkat = confine._syscalls(confine._DELETE, column)["unlinkat"]
        assert (_verdict(prog, arch, unlinkat) == eperm) != allow_delete
        assert _verdict(prog, arch, numbers["execve"] + 1000) == allow  # a call nobody lists
