"""Run generated Python programs (MBPP completions plus their tests) and report which pass.

`run_program` writes the program into a fresh scratch directory and starts `confine.py` as a script
(`python -I -B -S`, site-packages on the path but no .pth file run), inside bubblewrap where it
can. That process, the *monitor*, forks a child that locks itself down and runs the program.
- With tests (`tests=checks.plan(...)`, what MBPP uses): after the program the child evaluates each
  test's *parts* (the calls of the program's functions, `checks.py`) and sends their values back as
  plain data on a pipe, then a last word that it ran to its end. Once it is gone, the monitor forks
  a *judge* that never ran the program, locks it down the same way, rebuilds the values as Python's
  own types and evaluates each test's check with its own builtins and imports. A program passes
  when every test holds, it ran to its end and exited 0. No secret exists for a program to find,
  and an object it returns cannot answer a comparison: the judge never holds one.
- Without tests: only if the program's last line ran does the child write a random sentinel to
  stdout; it passes when it exits 0 *and* its output ends with the sentinel. That stops early exits,
  not forgery (the sentinel is in the child's memory): use tests for a score.
The monitor enforces the timeout (the program's, then the judge's): it kills and reaps the child,
and whatever the child left behind, before it exits, and tells the caller on a pipe the program
never holds whether it timed out and what the judge found; so when `run_program` returns, nothing
the program started runs.

Three kernel layers stack, each where the machine has it (DIVERSED_SANDBOX=`bwrap,landlock,seccomp`
by default, any subset, or `none`; or the `layers` argument):
- bwrap (bubblewrap; unprivileged, through a user namespace): new PID, network, IPC, UTS, cgroup,
  mount and user namespaces, no capability, no further user namespace, `--die-with-parent`. The
  program sees read-only /usr, /lib*, /bin, the /etc files in _ETC and the Python installation; its
  own /proc (without /proc/sys), read-only /dev and a 16 MiB /tmp; a 64 MiB tmpfs as scratch. As bwrap
  cannot cap a tmpfs's inodes, the monitor kills a program holding more than FILES files in the two.
- Landlock (Linux >= 5.13, through ctypes): reading only those paths and /proc/self, writing only
  in scratch and to /dev/null, /dev/zero, /dev/full, executing nothing. A Landlock domain cannot
  ptrace outside itself, so the /proc/<pid>/mem, environ, maps, fd of the caller, the monitor and
  other programs stay closed, for root too. ABI >= 3 also stops truncation, >= 4 TCP, >= 6 signals
  to and abstract unix sockets of processes outside.
- seccomp (Linux x86_64 and aarch64): EPERM for the calls in confine.py's _DENY (new processes:
  clone only with CLONE_THREAD and no namespace flag, clone3 ENOSYS so that glibc uses clone; exec,
  setsid/setpgid, every signal, ptrace, process_vm_*, pidfd_*, namespaces, mounts, sockets,
  SysV and POSIX IPC, memfd, inotify, fanotify, io_uring, bpf, keyrings, modules, clocks,
  link, mknod, truncate by path, the chmod, chown, utime and xattr families; unlink and rename unless
  bwrap or Landlock keeps writes in scratch); prlimit, setpriority, sched_set*, ioprio_set on any
  process but itself; F_SETOWN, F_SETSIG, FIOSETOWN (signals sent through a file), TIOCSTI; F_SETLEASE
  and F_NOTIFY (a lease stalls whoever opens the file); the inode-flag, inode-version and fsxattr
  ioctls (FS_IOC_SETFLAGS, FS_IOC_SETVERSION, FS_IOC_FSSETXATTR: a file's owner, root included, could
  set them on files it may only read).

Always on: the monitor's timeout; RLIMIT_AS 2 GiB, RLIMIT_FSIZE 16 MiB (stdout too), RLIMIT_NOFILE 32
(hard limit too), RLIMIT_CPU, RLIMIT_CORE/RTPRIO/NICE/MSGQUEUE 0, and RLIMIT_NPROC 0 where seccomp is
not enforced (there it also stops a non-root program's threads); 64 KiB of output and 16 MiB of test
values read back; a minimal environment; a Python guard that makes os.kill, os.fork, posix.execv,
subprocess.Popen, socket.socket, ... raise and refuses a 17th thread (clear messages; ctypes gets
round it: then RLIMIT_AS, which holds every thread's stack, bounds them). On Linux also: no_new_privs; no
capability in the child (root cannot mount, override permissions or ptrace a non-dumpable process);
the monitor non-dumpable, a subreaper that kills what the program leaves, and the program dying with
it (PR_SET_PDEATHSIG); the program first for the kernel's OOM killer (oom_score_adj 1000). Where this
user may make one, a memory cgroup per program (memcg.py) caps all it holds at the same 2 GiB, the
kernel's memory for it included (memfd, tmpfs and pipe pages, inodes): past it the program is killed
and its output says so.

Which layer closes an escape on its own:
    escape                                    bwrap     Landlock    seccomp
    read or write the caller's memory          yes       yes         [1]
    read the caller's environ, files, project  yes       yes         environ [1], files no
    write or truncate files outside scratch    yes       yes         no (unlink, rename: yes)
    chmod, chown, utime, xattrs outside        yes       no          yes
    run a binary                               inside    yes         yes
    mount                                      yes       [2]         yes
    network, IPC                               yes       TCP only    yes
    signal or ptrace other processes           yes       yes [4]     yes
    change the caller's limits or priority     yes       no          yes
    outlive the timeout (setsid, fork)         yes       [3]         yes
    files left in /tmp, /dev/shm, $HOME        yes       yes         no
    fill the disk                              yes       no          no
    watch file names (inotify, fanotify)       yes       no          yes
    hold memory RLIMIT_AS misses (memfd) [5]   no        no          yes
    inode flags of files it may read           yes       no          yes
    a lease on a file it may read              no        no          yes
    forge a test's verdict                     [6]       [6]         [6]
[1] Without bwrap and Landlock the caller makes itself non-dumpable at its first run (it warns):
    with no capability in the child, that closes its memory and environ for root and non-root.
[2] Closed in every configuration: the child has no capability.
[3] Closed in every configuration by the monitor (kill by pid, subreaper).
[4] Signals from ABI 6 on (kernel 6.12); ptrace (and so /proc/<pid>/mem) from ABI 1.
[5] Closed in every configuration where there is a memory cgroup. Without one, RLIMIT_NOFILE bounds
    what open files hold: 16 pipes of 1 MiB (pipe-max-size), without seccomp 32 memfds of 16 MiB.
[6] With tests, closed in every configuration by the judge (within what checks.py says).

Left open: with tests, what `checks.py` says it does not close (a comparison inside a test's own
comprehension); a program that knows the expected values may return them or send them itself (the
prompt shows the tests). Without tests, the sentinel can be found in the child's memory.
Kernel exploits and side channels; contention for CPU and memory. Reading the Python
installation, /usr and the /etc files in _ETC. Without bwrap: metadata (stat) of any path, other
processes and their command lines in /proc, and a scratch directory whose files are bounded one by one
(RLIMIT_FSIZE), not in number: on disk that can fill the disk, on tmpfs (TMPDIR on one) it is memory,
capped by the memory cgroup only. Without a memory cgroup also: SysV shared memory under bwrap alone
(its own IPC namespace, freed when the program ends), fcntl record locks (tens of MiB in a timeout:
each costs time linear in those held), negative dentries. With seccomp alone, root programs can write
every file root can (/etc, /proc/sys): the warning says so.

Degrading: at the first run in a process, every layer that is not enforced (not installed, not in
this kernel, other CPU, not Linux, or switched off) gets one RuntimeWarning saying what is then
open. A layer probed to work that then fails in the child fails the program (status 125).

This file is the caller's side: the opt-in, which layers this machine has, the bwrap command and
running programs; the memory cgroup is memcg.py's. What runs inside the sandbox (the monitor, the
lock-down, the filters) is `confine.py`, a script with the standard library only.
"""

from __future__ import annotations

import marshal
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from diversed.errors import UserError
from diversed.tasks import checks, confine, memcg

ALLOW_ENV = "DIVERSED_ALLOW_CODE_EXECUTION"
LAYERS_ENV = "DIVERSED_SANDBOX"
LAYERS = ("bwrap", "landlock", "seccomp")
DEFAULT_TIMEOUT_S = 10.0
MEMORY_BYTES = 2 << 30  # RLIMIT_AS
FILE_BYTES = 16 << 20  # RLIMIT_FSIZE: also the most output a program can write
OUTPUT_BYTES = 64 << 10  # how much of the output is read back
SCRATCH_BYTES = 64 << 20  # the scratch tmpfs under bwrap
FILES = 10_000  # the most files and directories a program may hold in scratch and /tmp under bwrap
OPEN_FILES = 32  # RLIMIT_NOFILE: Python needs a few; each open memfd or pipe holds kernel memory
BACKSTOP_S = 5.0  # the caller kills the monitor this long after the timeout, if it still runs

_LINUX = sys.platform.startswith("linux")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = "ld.so.cache localtime passwd group"  # nothing secret: what glibc and the standard library read
_MISSING = {  # what is open when the layer is not enforced
    "bwrap": "no PID/mount/network/IPC namespaces: programs see the host's processes and file system, "
    "and their scratch directory is on disk",
    "landlock": "programs can read every file their user can read and, without bwrap, write every file "
    "it can write",
    "seccomp": "no kernel block on new processes, exec, setsid, signals, sockets, ptrace, mount, chmod: "
    "only the Python guard (which ctypes gets round) and the other layers",
}


class CodeExecutionNotAllowed(UserError, RuntimeError):
    """Running generated code needs an explicit opt-in."""


def code_execution_allowed(opt_in: bool = False) -> bool:
    """True if the caller opted in, or DIVERSED_ALLOW_CODE_EXECUTION=1 is set."""
    return bool(opt_in) or os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes")


def require_code_execution(opt_in: bool, what: str) -> None:
    """Raise a clear error unless running generated code was opted into."""
    if not code_execution_allowed(opt_in):
        raise CodeExecutionNotAllowed(
            f"{what} runs model-generated Python code on this machine. Opt in with "
            f"task.allow_code_execution=true or {ALLOW_ENV}=1; diversed/tasks/execution.py says what its "
            f"sandbox does and does not protect against."
        )


@dataclass(frozen=True)
class ExecutionResult:
    passed: bool
    status: str  # "passed", "failed" or "timeout"
    returncode: int | None
    output: str  # the first OUTPUT_BYTES of stdout + stderr, then the judge's reasons for failed tests
    seconds: float
    tests: tuple[str, ...] = ()  # with tests: per test line "passed", "failed" or "error: why"


# ---------------------------------------------------------------- the layers this machine has

_probed: dict[str, str | None] = {}  # layer -> None if it works here, else why not
_warned: set[str] = set()
_lock = threading.Lock()


def requested_layers(layers: Iterable[str] | None = None) -> tuple[str, ...]:
    """The layers asked for: `layers`, else DIVERSED_SANDBOX, else all of them."""
    if layers is None:
        value = os.environ.get(LAYERS_ENV, "").strip().lower()
        layers = () if value == "none" else [s.strip() for s in value.split(",") if s.strip()] or LAYERS
    layers = tuple(layers)
    unknown = set(layers) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown sandbox layers {sorted(unknown)}; choose from {LAYERS} (or 'none')")
    return tuple(name for name in LAYERS if name in layers)


def probe_layers() -> dict[str, str | None]:
    """For each layer: None if this machine can enforce it, else why not (probed once per process)."""
    with _lock:
        if not _probed:
            _probed.update(bwrap=_probe_bwrap(), landlock=_probe_landlock(), seccomp=_probe_seccomp())
        return dict(_probed)


def sandbox_layers(layers: Iterable[str] | None = None) -> dict[str, str | None]:
    """For each layer: None if it will be enforced, else why not. Warns once per layer and process."""
    asked, probed = requested_layers(layers), probe_layers()
    state = {name: probed[name] if name in asked else f"switched off by {LAYERS_ENV}" for name in LAYERS}
    with _lock:
        for name, why in state.items():
            if why is not None and name not in _warned:
                _warned.add(name)
                message = f"diversed sandbox: {name} not enforced ({why}): {_MISSING[name]}."
                warnings.warn(message, RuntimeWarning, stacklevel=3)
    return state


def _probe_landlock() -> str | None:
    if not _LINUX:
        return "not on Linux"
    return None if confine.landlock_abi() > 0 else "Landlock unavailable in this kernel"


def _probe_seccomp() -> str | None:
    if not _LINUX:
        return "not on Linux"
    return None if os.uname().machine in confine.SECCOMP_ARCHES else f"no filter for CPU {os.uname().machine}"


def _probe_bwrap() -> str | None:
    import shutil
    import tempfile

    if not _LINUX:
        return "not on Linux"
    if shutil.which("bwrap") is None:
        return "bubblewrap not found; install the Debian package `bubblewrap`"
    with tempfile.TemporaryDirectory(prefix="diversed-exec-") as workdir:
        open(os.path.join(workdir, confine.PROGRAM_FILE), "w").close()
        cmd = [*_bwrap_command(workdir), sys.executable, "-I", "-S", "-c", "pass"]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap cannot start here: {e}"
    why = done.stderr.decode(errors="replace").strip()[:300]
    return None if done.returncode == 0 else f"bubblewrap cannot start here: {why}"


def _readable_paths() -> list[str]:
    """What a program may read: the system, the /etc files in _ETC and the Python installation."""
    paths = [p for p in _SYSTEM_DIRS if os.path.exists(p)] + [f"/etc/{name}" for name in _ETC.split()]
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {os.path.realpath(p) for p in prefixes} | {os.path.realpath(sys.executable)}
    paths = [p for p in paths + sorted(prefixes - {"/"}) if os.path.lexists(p)]
    return [p for p in paths if not any(p.startswith(q + "/") for q in paths if not os.path.islink(q))]


def _bwrap_command(workdir: str) -> list[str]:
    """bwrap and its options up to `--`: the view of the file system described above."""
    cmd = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    cmd += ["--new-session", "--cap-drop", "ALL"]
    # Root keeps uid 0 in the sandbox: hide the sysctls a uid-0 process may write without capabilities.
    cmd += ["--proc", "/proc", "--tmpfs", "/proc/sys", "--remount-ro", "/proc/sys"]
    if os.path.exists("/proc/sysrq-trigger"):
        cmd += ["--ro-bind", "/dev/null", "/proc/sysrq-trigger"]
    cmd += ["--dev", "/dev", "--remount-ro", "/dev"]  # /dev/shm read-only too
    cmd += ["--size", str(FILE_BYTES), "--tmpfs", "/tmp"]  # before the binds: Python may live under /tmp
    for path in _readable_paths():
        if os.path.islink(path) and path in _SYSTEM_DIRS:  # merged /usr: /bin -> usr/bin
            cmd += ["--symlink", os.readlink(path), path]
        else:
            cmd += ["--ro-bind-try", path, path]
    script, program = os.path.abspath(confine.__file__), os.path.join(workdir, confine.PROGRAM_FILE)
    cmd += ["--ro-bind", script, script, "--size", str(SCRATCH_BYTES), "--tmpfs", workdir]
    return cmd + ["--ro-bind", program, program, "--chdir", workdir, "--remount-ro", "/", "--"]


def _site_packages() -> list[str]:
    import site

    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def _protect_caller() -> None:
    """Without bwrap and Landlock: make this process non-dumpable, so that a program without
    capabilities cannot open its /proc/<pid>/mem or environ (and no core dumps, no debugger
    attaching as the same non-root user)."""
    with _lock:
        if not _LINUX or "caller" in _warned:
            return
        _warned.add("caller")
    confine.prctl(4, 0)  # PR_SET_DUMPABLE
    root = " As root, programs can write every file root can (/etc, /proc/sys): use bwrap or Landlock."
    message = "diversed sandbox: neither bwrap nor Landlock is enforced: this process made itself "
    message += "non-dumpable to keep programs out of its memory and environment."
    warnings.warn(message + (root if os.geteuid() == 0 else ""), RuntimeWarning, stacklevel=3)


# ---------------------------------------------------------------- caller side


def run_program(
    program: str,
    *,
    tests: checks.Plan | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    memory_bytes: int = MEMORY_BYTES,
    file_bytes: int = FILE_BYTES,
    output_bytes: int = OUTPUT_BYTES,
    layers: Iterable[str] | None = None,
) -> ExecutionResult:
    """Run one program in the sandbox. Without `tests` it passes if it runs to its end and exits 0
    (the sentinel: it stops early exits, not forgery). With `tests` (`checks.plan`), their parts run
    after the program and it passes if the judge, apart from it, finds every test line true."""
    import tempfile  # (the caller's side only: the monitor starts faster without it)

    use = {name for name, why in sandbox_layers(layers).items() if why is None}
    if not use & {"bwrap", "landlock"}:
        _protect_caller()
    try:
        source = program.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate, say: this program fails, not the batch it is in
        why = f"diversed sandbox: the program did not run: it is not text UTF-8 can encode ({e.reason}: "
        why += f"{program[e.start : e.end]!r} at {e.start})."
        return ExecutionResult(
            False, "failed", None, why, 0.0, ("failed",) * len(tests.checks) if tests else ()
        )
    sentinel = os.urandom(16).hex() if tests is None else None
    with (
        memcg.MemoryGroup.for_program(memory_bytes) as group,
        tempfile.TemporaryDirectory(prefix="diversed-exec-", ignore_cleanup_errors=True) as workdir,
        tempfile.TemporaryFile() as out,
    ):
        with open(os.path.join(workdir, confine.PROGRAM_FILE), "wb") as f:
            f.write(source)
        status_r, status_w = os.pipe()
        cmd = _monitor_command(use, workdir, timeout, status_w)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                _bwrap_command(workdir) + cmd if "bwrap" in use else cmd,
                cwd=workdir,
                env=_environment(workdir),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, for the backstop
                preexec_fn=_preexec(memory_bytes, file_bytes, group),
                pass_fds=(status_w,),
            )
        finally:
            os.close(status_w)
        # The program's time, then the judge's: at most as long again.
        backstopped, said = _wait(
            proc, timeout * (1 if tests is None else 2) + BACKSTOP_S, status_r, sentinel, tests
        )
        seconds = time.monotonic() - start
        finished, output = _output(out, sentinel, output_bytes)
        if group is not None and group.oom_kills():
            output += f"\ndiversed sandbox: the program went over its memory limit ({memory_bytes} bytes).\n"
    return _result(said, backstopped, proc.returncode, tests, finished, output, seconds)


def _monitor_command(use: set[str], workdir: str, timeout: float, status_fd: int) -> list[str]:
    """The monitor's command line (`confine.py`), its settings marshalled on it: the layers in `use`,
    the program's time, the status pipe, the paths it may read and write, its limits."""
    config = {
        "timeout": timeout,
        "status_fd": status_fd,
        "caller": os.getpid(),
        "bwrap": "bwrap" in use,
        "seccomp": "seccomp" in use,
        "contained": bool(use & {"bwrap", "landlock"}),  # writes cannot leave scratch
        "landlock": {"read": _readable_paths(), "write": workdir} if "landlock" in use else None,
        "path": _site_packages(),
        "open_files": OPEN_FILES,
        "threads": confine.THREADS,
        "files": ([workdir, "/tmp"], FILES) if "bwrap" in use else None,  # the sandbox's own tmpfs
    }
    # -S: no site module and no .pth files at start-up (a tenth of it); site-packages goes on the path.
    # (marshal, not json: importing json would cost the monitor's start-up 6 ms)
    return [sys.executable, "-I", "-B", "-S", os.path.abspath(confine.__file__), marshal.dumps(config).hex()]


def _wait(proc: subprocess.Popen, backstop_s: float, status_r: int, sentinel, tests) -> tuple[bool, bytes]:
    """Hand the monitor the sentinel and the tests, wait for it (its process group killed after
    `backstop_s` at the latest, and in any case once it ends), and read its status pipe. Returns
    (whether the backstop killed it, what the monitor said)."""
    backstop = threading.Event()

    def on_backstop() -> None:
        backstop.set()
        _kill_group(proc.pid)

    timer = threading.Timer(backstop_s, on_backstop)
    timer.start()
    try:
        try:  # (on stdin, not the command line: /proc shows command lines to other processes)
            given = {"sentinel": sentinel, "tests": None if tests is None else tests.to_config()}
            proc.stdin.write(marshal.dumps(given))
            proc.stdin.close()
        except OSError:
            pass  # it died before reading: the exit status tells
        # Wait without reaping: until it is reaped its pid (= the group id) cannot be reused,
        # so the group kill below cannot hit an unrelated process.
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    finally:
        timer.cancel()
        timer.join()  # a kill already under way finishes before the pid can be reaped
        _kill_group(proc.pid)
        proc.wait()
        said = _read_status(status_r)
    return backstop.is_set(), said


def _output(out, sentinel: str | None, output_bytes: int) -> tuple[bool, str]:
    """(whether the program printed the sentinel last: it ran to its end, its first `output_bytes`
    of output without the sentinel) from the file that caught stdout and stderr."""
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - 256))
    finished = sentinel is not None and out.read().endswith(f"\n{sentinel}\n".encode())
    out.seek(0)
    output = out.read(output_bytes).decode("utf-8", "replace")
    return finished, output if sentinel is None else output.replace(f"\n{sentinel}\n", "")


def _result(said: bytes, backstopped: bool, code: int, tests, finished: bool, output: str, seconds: float):
    """The program's `ExecutionResult` from the monitor's word, the exit status and the output (with
    `tests`, the judge's verdicts: every line must pass)."""
    ended, _, judged = said.partition(b"\n")
    timed_out = backstopped or ended == b"timeout"
    returncode = -signal.SIGKILL if timed_out else code  # killed, as the caller sees it
    verdicts: tuple[str, ...] = ()
    if tests is not None:
        ran, verdicts = _verdicts(judged, len(tests.checks), ended.decode(errors="replace") or "no word")
        finished = ran and all(v == "passed" for v in verdicts)
        output += "".join(
            f"\ndiversed judge: test {i + 1}: {v}" for i, v in enumerate(verdicts) if v != "passed"
        )
        output += "" if ran or not judged else "\ndiversed judge: the program did not run to its end"
    passed = finished and returncode == 0 and not timed_out  # exit 0: the program and the parts ran
    status = "timeout" if timed_out else "passed" if passed else "failed"
    return ExecutionResult(passed, status, returncode, output, seconds, verdicts)


def _read_status(fd: int) -> bytes:
    """What the monitor said on the status pipe (every writer is gone once the program is reaped)."""
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    return b"".join(chunks)


def _verdicts(judged: bytes, lines: int, ended: str) -> tuple[bool, tuple[str, ...]]:
    """Whether the program ran to its end, and the judge's verdict per test line (a test the judge
    said nothing about failed)."""
    import json

    try:
        said = json.loads(judged) if judged else f"the tests were not judged (the program's end: {ended})"
    except ValueError:
        said = "the judge's verdicts could not be read"
    if isinstance(said, str):
        return False, (f"error: {said}",) * lines
    tests = said.get("tests") if isinstance(said, dict) else None
    if not isinstance(tests, list) or len(tests) != lines or not all(isinstance(v, str) for v in tests):
        return False, ("error: the judge's verdicts could not be read",) * lines
    return said.get("ran") is True, tuple(tests)


def run_programs(
    programs: Iterable[str | tuple[str, checks.Plan]], *, workers: int | None = None, **limits: object
) -> list[ExecutionResult]:
    """Run many programs (each a text, or a text and its tests' plan), at most `workers` (default:
    the core count) at a time; results in order."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(p, None) if isinstance(p, str) else p for p in programs]
    if not jobs:
        return []
    sandbox_layers(limits.get("layers"))  # warn once, from the caller's thread, before starting
    memcg.available()
    workers = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda job: run_program(job[0], tests=job[1], **limits), jobs))


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


def _preexec(memory_bytes: int, file_bytes: int, group: memcg.MemoryGroup | None) -> Callable[[], None]:
    """The `preexec_fn`: it runs between fork and exec, so it only enters the cgroup and calls setrlimit."""
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
        if group is not None:
            group.enter()
        for kind, pair in limits:
            resource.setrlimit(kind, pair)

    return apply


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
