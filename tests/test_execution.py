"""The sandbox against hostile programs: each fails within its timeout (plus a second), and
neither the test process nor a correct program run in the same batch is affected."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from diversed import execution
from diversed.execution import ExecutionResult, run_program, run_programs

TIMEOUT = 3.0

CORRECT = "def add(a, b):\n    return a + b\n\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\n"


def _seccomp_active() -> bool:
    probe = "assert 'Seccomp:\\t2' in open('/proc/self/status').read()\n"
    return run_program(probe, timeout=TIMEOUT).passed


def _hostile(canary: Path, port: int, seccomp: bool) -> dict[str, str]:
    programs = {
        "wrong_answer": "def add(a, b):\n    return a - b\n\nassert add(1, 2) == 3\n",
        "syntax_error": "def add(a, b)\n    return a + b\n",
        "infinite_loop": "import os\nprint(os.getpid(), flush=True)\nwhile True:\n    pass\n",
        "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
        "allocate_10gb": "x = bytearray(10 * 2**30)\nx[-1] = 1\n",
        "remove_canary": f"import os\nos.remove({str(canary)!r})\n",
        "unlink_canary_pathlib": f"import pathlib\npathlib.Path({str(canary)!r}).unlink()\n",
        "rmtree_outside": f"import shutil\nshutil.rmtree({str(canary.parent)!r})\n",
        "rm_via_shell": f"import os\nassert os.system('rm -rf {canary.parent}') == 0\n",
        "rm_via_subprocess": f"import subprocess\nsubprocess.run(['rm', '-rf', {str(canary.parent)!r}], check=True)\n",
        "open_socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n",
        "exit_before_tests": "def add(a, b):\n    return a - b\n\nimport os\nos._exit(0)\nassert add(1, 2) == 3\n",
        "sys_exit_before_tests": "import sys\nsys.exit(0)\nassert False\n",
        "kill_parent": "import os\nimport signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
        "kill_parent_ctypes": (
            "import ctypes, os\nassert ctypes.CDLL(None).kill(os.getppid(), 9) == 0\nimport time\ntime.sleep(1)\n"
        ),
        "print_100mb": "print('x' * 100_000_000)\n",
        "print_100mb_lines": "for _ in range(1_000_000):\n    print('y' * 99)\n",
    }
    if seccomp or os.geteuid() != 0:
        # Bypasses the Python guard: only the kernel (seccomp, or RLIMIT_NPROC for non-root)
        # stops it, so it is only run where one of them will. Children would idle, not fork.
        programs["fork_bomb_ctypes"] = (
            "import ctypes, os, time\nlibc = ctypes.CDLL(None)\nwhile True:\n"
            "    pid = libc.fork()\n    assert pid >= 0, 'fork failed'\n"
            "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
        )
    if seccomp:
        programs["unlink_canary_ctypes"] = (
            f"import ctypes\nassert ctypes.CDLL(None).unlink({str(canary).encode()!r}) == 0\n"
        )
        programs["socket_ctypes"] = "import ctypes\nassert ctypes.CDLL(None).socket(2, 1, 0) >= 0\n"
    return programs


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict:
    canary = tmp_path_factory.mktemp("outside") / "canary.txt"
    canary.write_text("still here")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    seccomp = _seccomp_active()
    programs = {
        "correct": CORRECT,
        "report_parent": "import os\nprint('parent', os.getppid())\n",
        "no_inherited_secrets": "import os\nassert 'DIVERSED_TEST_SECRET' not in os.environ\n",
        "runs_like_a_script": (  # its own __main__ module, so pickle and typing find its classes
            "import dataclasses, pickle, typing\n@dataclasses.dataclass\nclass P:\n    x: int\n\n"
            "assert pickle.loads(pickle.dumps(P(1))) == P(1)\nassert typing.get_type_hints(P) == {'x': int}\n"
        ),
        **_hostile(canary, listener.getsockname()[1], seccomp),
    }
    os.environ["DIVERSED_TEST_SECRET"] = "hunter2"
    start = time.monotonic()
    try:
        results = run_programs(programs.values(), timeout=TIMEOUT)
    finally:
        del os.environ["DIVERSED_TEST_SECRET"]
    elapsed = time.monotonic() - start
    listener.setblocking(False)
    try:
        listener.accept()
        connected = True
    except BlockingIOError:
        connected = False
    listener.close()
    return {
        "results": dict(zip(programs, results, strict=True)),
        "canary": canary,
        "connected": connected,
        "elapsed": elapsed,
        "seccomp": seccomp,
    }


HOSTILE = [
    "wrong_answer", "syntax_error", "infinite_loop", "fork_bomb", "fork_bomb_ctypes", "allocate_10gb",
    "remove_canary", "unlink_canary_pathlib", "rmtree_outside", "rm_via_shell", "rm_via_subprocess",
    "unlink_canary_ctypes", "open_socket", "socket_ctypes", "exit_before_tests", "sys_exit_before_tests",
    "kill_parent", "kill_parent_ctypes", "print_100mb", "print_100mb_lines",
]  # fmt: skip


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_program_scores_zero_within_timeout(batch: dict, name: str) -> None:
    if name not in batch["results"]:
        pytest.skip("needs seccomp (or a non-root host) to be run safely")
    r: ExecutionResult = batch["results"][name]
    assert not r.passed, r
    assert r.status in ("failed", "timeout")
    assert r.seconds <= TIMEOUT + 1.0, r
    assert len(r.output.encode()) <= execution.OUTPUT_BYTES + 4 * 1024  # decoding may widen a little


def test_correct_programs_in_the_same_batch_pass(batch: dict) -> None:
    for name in ("correct", "report_parent", "no_inherited_secrets", "runs_like_a_script"):
        r = batch["results"][name]
        assert r.passed and r.status == "passed" and r.returncode == 0, (name, r)


def test_host_and_files_outside_survive(batch: dict) -> None:
    assert batch["canary"].read_text() == "still here"
    assert not batch["connected"], "a sandboxed program reached a socket on the host"
    parent = int(batch["results"]["report_parent"].output.split()[1])
    assert parent != os.getpid(), "the program's parent must be the sandbox's intermediate process"
    assert batch["elapsed"] < 30


def test_timeout_kills_the_process(batch: dict) -> None:
    r = batch["results"]["infinite_loop"]
    assert r.status == "timeout" and r.returncode is not None and r.returncode < 0
    pid = int(r.output.split()[0])
    status = Path(f"/proc/{pid}/status")
    # Gone, or a zombie waiting for init to reap it: either way it no longer runs.
    assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_errors_and_output_are_reported(batch: dict) -> None:
    assert "AssertionError" in batch["results"]["wrong_answer"].output
    assert "SyntaxError" in batch["results"]["syntax_error"].output
    assert "disabled in the diversed sandbox" in batch["results"]["remove_canary"].output
    big = batch["results"]["print_100mb"]
    assert 0 < len(big.output) <= execution.OUTPUT_BYTES


def test_seccomp_blocks_what_the_guard_cannot(batch: dict) -> None:
    if not batch["seccomp"]:
        pytest.skip("seccomp is not available on this machine")
    for name in ("unlink_canary_ctypes", "socket_ctypes", "fork_bomb_ctypes"):
        assert not batch["results"][name].passed


def test_sentinel_requires_running_to_the_end() -> None:
    # A program that prints a look-alike of the sentinel line still fails if it exits early.
    r = run_program("print('\\n' + 'f' * 32)\nimport os\nos._exit(0)\n", timeout=TIMEOUT)
    assert not r.passed and r.returncode == 0


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
