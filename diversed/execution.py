"""Run generated Python programs (MBPP completions plus their tests) and report which pass.

Each program runs in its own process. `run_program` starts this file as a script (`python -I -B`)
in a fresh temporary directory and a new session, writes a random sentinel to its stdin, and
waits. That process forks once: the child locks itself down, runs the program, and only if the
program's last line ran writes the sentinel to stdout. A program passes when it exits 0 *and* its
output ends with the sentinel, so `os._exit(0)` or `sys.exit(0)` before the tests does not pass.
The program's parent is that intermediate process, never the caller.

What is done, per program:
- a wall-clock timeout (default 10 s), then SIGKILL to the whole process group; RLIMIT_CPU as
  a backstop for anything that left the group;
- RLIMIT_AS (2 GiB), RLIMIT_FSIZE (16 MiB per written file, stdout included), RLIMIT_CORE 0 in
  the caller's `preexec_fn`; RLIMIT_NPROC 0 in the child (no new processes or threads; set
  after the fork because the intermediate process needs that one fork);
- stdout and stderr go to an anonymous temporary file, of which at most 64 KiB is read back;
- on Linux x86_64 and aarch64, a seccomp filter makes fork/clone, kill and the other signalling
  calls, ptrace, socket creation, and unlink/rmdir/rename fail with EPERM. The kernel enforces
  it, so ctypes cannot get round it, and unlike RLIMIT_NPROC it also binds root;
- a Python-level guard replaces os.kill, os.fork, os.remove, shutil.rmtree, subprocess.Popen,
  socket.socket, ... with functions that raise, so the common cases fail with a clear message
  (after OpenAI human-eval's `reliability_guard`);
- a minimal environment (no inherited API keys), with HOME and TMPDIR in the temporary directory;
- at most `os.cpu_count()` programs at a time (`run_programs`).

What it does NOT protect against. This is not a security boundary; run code you do not trust in
a VM or container:
- the program runs as the caller's user: it can read every file that user can read, and
  create or overwrite (though not delete or rename) every file that user can write, anywhere;
- without seccomp (other kernels, other CPUs) deleting files, signalling and opening sockets
  are blocked only by the Python guard, which ctypes gets round; no network namespace is used;
- without seccomp, root is not bound by RLIMIT_NPROC; only the process-group kill and
  RLIMIT_CPU then contain a fork bomb;
- the sentinel stops programs that exit early by accident, not a program written to cheat
  (it can find the sentinel in its own process's memory);
- kernel exploits, side channels, reading other processes' memory through /proc, and filling
  the disk 16 MiB at a time are not prevented.

This file must stay runnable as a script with the standard library only (`-I` does not put the
package on the path): the sandbox side imports nothing from `diversed`.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

ALLOW_ENV = "DIVERSED_ALLOW_CODE_EXECUTION"
DEFAULT_TIMEOUT_S = 10.0
MEMORY_BYTES = 2 << 30  # RLIMIT_AS
FILE_BYTES = 16 << 20  # RLIMIT_FSIZE: also the most output a program can write
OUTPUT_BYTES = 64 << 10  # how much of the output is read back
PROGRAM_FILE = "program.py"


class CodeExecutionNotAllowed(RuntimeError):
    """Running generated code needs an explicit opt-in."""


def code_execution_allowed(opt_in: bool = False) -> bool:
    """True if the caller opted in, or DIVERSED_ALLOW_CODE_EXECUTION=1 is set."""
    return bool(opt_in) or os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes")


def require_code_execution(opt_in: bool, what: str) -> None:
    """Raise a clear error unless running generated code was opted into."""
    if not code_execution_allowed(opt_in):
        raise CodeExecutionNotAllowed(
            f"{what} runs model-generated Python code on this machine. Opt in with "
            f"task.allow_code_execution=true or {ALLOW_ENV}=1; diversed/execution.py says what its "
            f"sandbox does and does not protect against."
        )


@dataclass(frozen=True)
class ExecutionResult:
    passed: bool
    status: str  # "passed", "failed" or "timeout"
    returncode: int | None
    output: str  # the first OUTPUT_BYTES of stdout + stderr
    seconds: float


# ---------------------------------------------------------------- caller side


def run_program(
    program: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    memory_bytes: int = MEMORY_BYTES,
    file_bytes: int = FILE_BYTES,
    output_bytes: int = OUTPUT_BYTES,
) -> ExecutionResult:
    """Run one program in the sandbox; it passes if it runs to its end and exits 0."""
    sentinel = os.urandom(16).hex()
    with (
        tempfile.TemporaryDirectory(prefix="diversed-exec-", ignore_cleanup_errors=True) as workdir,
        tempfile.TemporaryFile() as out,
    ):
        with open(os.path.join(workdir, PROGRAM_FILE), "w", encoding="utf-8") as f:
            f.write(program)
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", os.path.abspath(__file__), str(timeout)],
            cwd=workdir,
            env=_environment(workdir),
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so one killpg reaches everything
            preexec_fn=_rlimits(memory_bytes, file_bytes),
        )
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            _kill_group(proc.pid)

        timer = threading.Timer(timeout, on_timeout)
        timer.start()
        try:
            try:
                proc.stdin.write(f"{sentinel}\n".encode())
                proc.stdin.close()
            except OSError:
                pass  # it died before reading: the exit status tells
            # Wait without reaping: until it is reaped its pid (= the group id) cannot be reused,
            # so the group kill below cannot hit an unrelated process.
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        finally:
            timer.cancel()
            timer.join()  # a kill already under way finishes before the pid can be reaped
            _kill_group(proc.pid)  # whatever the program left running dies with its group
            proc.wait()
        seconds = time.monotonic() - start

        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - 256))
        finished = out.read().endswith(f"\n{sentinel}\n".encode())
        out.seek(0)
        output = out.read(output_bytes).decode("utf-8", "replace").replace(f"\n{sentinel}\n", "")

    passed = finished and proc.returncode == 0 and not timed_out.is_set()
    status = "timeout" if timed_out.is_set() else "passed" if passed else "failed"
    return ExecutionResult(passed, status, proc.returncode, output, seconds)


def run_programs(
    programs: Iterable[str], *, workers: int | None = None, **limits: float
) -> list[ExecutionResult]:
    """Run many programs, at most `workers` (default: the core count) at a time; results in order."""
    from concurrent.futures import ThreadPoolExecutor

    programs = list(programs)
    if not programs:
        return []
    workers = max(1, min(len(programs), workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda p: run_program(p, **limits), programs))


def _environment(workdir: str) -> dict[str, str]:
    # Nothing inherited: tokens and keys in the caller's environment stay there.
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",  # BLAS libraries must not try to start threads (RLIMIT_NPROC 0)
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _rlimits(memory_bytes: int, file_bytes: int) -> Callable[[], None]:
    """The `preexec_fn`: it runs between fork and exec, so it only calls setrlimit."""
    limits = []
    for kind, value in (
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        limits.append((kind, (value, value)))

    def apply() -> None:
        for kind, pair in limits:
            resource.setrlimit(kind, pair)

    return apply


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- sandbox side

# System calls the program may not make: create processes or threads, signal or trace other
# processes, open sockets, delete or rename files. Numbers from <asm/unistd.h>.
_SECCOMP_ARCHES = {
    # machine: (AUDIT_ARCH_*, blocked system call numbers)
    "x86_64": (
        0xC000003E,
        # clone fork vfork clone3 | kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo
        # pidfd_send_signal | ptrace process_vm_writev | socket socketpair
        # | unlink unlinkat rmdir rename renameat renameat2
        (56, 57, 58, 435, 62, 200, 234, 129, 297, 424, 101, 311, 41, 53, 87, 263, 84, 82, 264, 316),
    ),
    "aarch64": (
        0xC00000B7,
        # clone clone3 | kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_send_signal
        # | ptrace process_vm_writev | socket socketpair | unlinkat renameat renameat2
        (220, 435, 129, 130, 131, 138, 240, 424, 117, 271, 198, 199, 35, 38, 276),
    ),
}


def _install_seccomp() -> bool:
    """Make the blocked system calls fail with EPERM from now on; False where unsupported."""
    import ctypes

    machine = os.uname().machine
    if machine not in _SECCOMP_ARCHES:
        return False
    arch, blocked = _SECCOMP_ARCHES[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    # (code, jt, jf, k); jump targets are filled in below as offsets to the final "deny".
    prog = [(ld, 0, 0, 4), (jeq, 0, "deny", arch), (ld, 0, 0, 0)]  # seccomp_data.arch, .nr
    if machine == "x86_64":
        prog.append((jge, "deny", 0, 0x40000000))  # x32 system calls: another way in
    prog += [(jeq, "deny", 0, nr) for nr in blocked]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    end = len(prog) - 1

    class SockFilter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    def target(j: int | str, i: int) -> int:
        return end - i - 1 if j == "deny" else int(j)

    filters = (SockFilter * len(prog))(
        *(SockFilter(code, target(jt, i), target(jf, i), k) for i, (code, jt, jf, k) in enumerate(prog))
    )
    fprog = SockFprog(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    no_new_privs, set_seccomp, mode_filter = 38, 22, 2  # PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP
    if libc.prctl(no_new_privs, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
        return False
    return libc.prctl(set_seccomp, ctypes.c_ulong(mode_filter), ctypes.byref(fprog)) == 0


def _guard() -> None:
    """Replace the usual ways of escaping or doing damage with functions that raise."""
    import _socket
    import shutil
    import socket

    def refuse(name: str) -> Callable[..., None]:
        def disabled(*args: object, **kwargs: object) -> None:
            raise PermissionError(f"{name}() is disabled in the diversed sandbox")

        return disabled

    for module, names in (
        (
            os,
            "kill killpg fork forkpty setsid setpgid system popen posix_spawn posix_spawnp "
            "execv execve execvp execvpe execl execle execlp execlpe spawnv spawnve spawnvp spawnvpe "
            "remove unlink rmdir removedirs rename renames replace truncate chmod chown lchown",
        ),
        (shutil, "rmtree move chown"),
        (subprocess, "Popen call run check_call check_output getoutput getstatusoutput"),
        (socket, "socket socketpair create_connection create_server fromfd"),
        (_socket, "socket socketpair"),
        (signal, "pthread_kill"),
    ):
        for name in names.split():
            if hasattr(module, name):
                setattr(module, name, refuse(f"{module.__name__}.{name}"))


def _run_child(sentinel: str, timeout: float) -> None:
    """In the forked child: lock down, run the program, write the sentinel if it ran to its end."""
    import traceback
    import types

    write, exit_ = os.write, os._exit  # kept before the guard and the program can touch them
    cpu = int(timeout) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    _install_seccomp()
    with open(PROGRAM_FILE, encoding="utf-8") as f:
        source = f.read()
    sys.argv = [PROGRAM_FILE]
    _guard()
    try:
        code = compile(source, PROGRAM_FILE, "exec")
        # A fresh __main__ module, as if the program were run as a script (pickle, dataclasses and
        # typing look classes up in sys.modules), not sharing this file's globals.
        main = types.ModuleType("__main__")
        main.__file__ = PROGRAM_FILE
        sys.modules["__main__"] = main
        exec(code, main.__dict__)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # SystemExit too: exiting early is not passing
        try:
            sys.stdout.flush()
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            exit_(1)
    write(1, f"\n{sentinel}\n".encode())
    exit_(0)


def _sandbox_main() -> None:
    """The intermediate process: read the sentinel, fork the child, exit with its status."""
    timeout = float(sys.argv[1])
    sentinel = sys.stdin.readline().strip()
    pid = os.fork()
    if pid == 0:
        _run_child(sentinel, timeout)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell says


if __name__ == "__main__":
    _sandbox_main()
