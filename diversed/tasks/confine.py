"""The sandbox's own side: the monitor, the child's lock-down and the judge, run as a script.

`execution.run_program` starts this file as `python -I -B -S confine.py <config>` (inside bubblewrap
where it can) and writes on its stdin what the program must not see on a command line (the sentinel,
or the tests' plan), so it must stay runnable with the standard library only and import nothing from
`diversed` (`-I` does not put the package on the path). `main` is the *monitor*: it forks once,
enforces the timeout (and under bwrap the most files), kills and reaps whatever the program left,
reports on a pipe the program never holds and exits with the program's status. The child locks itself
down (resource limits, no_new_privs, no capability, Landlock, seccomp: `lock_down`), installs the
Python guard and runs the program. Then, without tests, it writes the sentinel only if its last line
ran; with tests, it evaluates their parts and sends each value as plain data (`_send_parts`,
`_plain`). The monitor reads them while it waits, and once the child is gone forks the *judge*, which
never ran the program: locked down the same way, it rebuilds the values (`_rebuild`) and evaluates
each test's check (`_judge`); its verdicts go to the caller with the monitor's word.

`execution.py` says which layer closes which escape and what stays open, `checks.py` how tests are
cut into parts and checks; this file only applies them. It does not choose the layers (the caller
probes the machine and passes its choice).
"""

from __future__ import annotations

import ctypes
import marshal
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable

PROGRAM_FILE = "program.py"
LOCKDOWN_FAILED = 125  # exit status of a child that could not apply a layer
RESULT_BYTES = 16 << 20  # the most of the test values a program sends back that the judge reads
VERDICT_BYTES = 48 << 10  # the judge's verdicts, at most: they fit the status pipe without a reader
THREADS = 16  # threads a program may run beside its main thread (the Python guard counts them)
_OVER = b"\n[-1]\n"  # appended when the values went over RESULT_BYTES
_TAG_DEPTH = 100  # nesting of a value sent back, at most
_ITEMS = 1 << 21  # items (container elements, characters / 64) in all values sent back, at most
_LINUX = sys.platform.startswith("linux")
_DEVICES = {"/dev/null": "rw", "/dev/zero": "rw", "/dev/full": "rw", "/dev/random": "r", "/dev/urandom": "r"}


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def prctl(option: int, arg: int) -> int:
    ulong = ctypes.c_ulong
    return _libc().prctl(option, ulong(arg), ulong(0), ulong(0), ulong(0))


# ---------------------------------------------------------------- sandbox side: the monitor


def main() -> None:
    """The monitor (this file as a script): fork the child, enforce the timeout, kill what is left,
    report, exit with its status."""
    config = marshal.loads(bytes.fromhex(sys.argv[1]))
    sys.path += config["path"]
    status_fd = config["status_fd"]
    if _LINUX:
        prctl(4, 0)  # PR_SET_DUMPABLE 0: the program cannot read or write this process's memory
        prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: what the program leaves behind comes back here
        if not config["bwrap"]:  # (bwrap's --die-with-parent does the same)
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the caller, even if already gone
            if os.getppid() != config["caller"]:
                os._exit(1)
    given = marshal.loads(_read_all(0))  # {"sentinel": str or None, "tests": checks.Plan's config or None}
    tests = given["tests"]
    results_r, results_w = os.pipe() if tests is not None else (-1, -1)
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        if tests is not None:
            os.close(results_r)
        _run_child(given, config, results_w)
    if tests is not None:
        os.close(results_w)
    ended, values = _watch(pid, config["timeout"], config["files"], results_r)
    _, status = os.waitpid(pid, 0)
    if _LINUX and not config["seccomp"]:  # (with seccomp, the program cannot start processes)
        _kill_descendants()
    verdicts = b""
    if tests is not None and ended == "done":
        verdicts = _judge_apart(values, tests, config)
    os.write(status_fd, f"{ended}\n".encode() + verdicts)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell says


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _watch(
    pid: int, timeout: float, files: tuple[list[str], int] | None, results: int = -1
) -> tuple[str, bytes]:
    """Wait for the child, killing it at the timeout or, if `files` = (paths, most), once the file
    systems at those paths (the sandbox's own tmpfs) hold more than `most` inodes, checked every
    20 ms: tmpfs has no inode limit bwrap can set, and each one is kernel memory. Meanwhile read the
    pipe `results` (if not -1) to its end, keeping its first RESULT_BYTES (more: the judge is told).
    Returns ("done", "timeout" or "files", what was read); the child is not reaped yet."""
    import time

    deadline, ended = time.monotonic() + timeout, ["done"]

    def on_alarm(*_: object) -> None:
        if ended[0] == "done" and (not files or time.monotonic() >= deadline - 0.001):
            ended[0] = "timeout"
        elif ended[0] == "done" and files and sum(_inodes(path) for path in files[0]) > files[1]:
            ended[0] = "files"
            os.write(2, f"\ndiversed sandbox: the program made more than {files[1]} files.\n".encode())
        if ended[0] != "done":
            os.kill(pid, signal.SIGKILL)
            if results >= 0:  # a process the program left could hold the pipe open: stop reading
                try:
                    os.close(results)
                except OSError:
                    pass

    def on_child(*_: object) -> None:  # the child ended: read what it wrote, not what it left running
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                os.set_blocking(results, False)
        except OSError:
            pass

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(timeout, 0.02) if files else timeout, 0.02 if files else 0)
    if results >= 0:
        signal.signal(signal.SIGCHLD, on_child)
        on_child()  # (it may have ended already)
    chunks, size = [], 0
    while results >= 0:
        try:
            chunk = os.read(results, 1 << 16)
        except OSError:  # closed at the timeout, or nothing more once the child ended
            break
        if not chunk:
            break
        if size < RESULT_BYTES:
            chunks.append(chunk[: RESULT_BYTES - size])
        size += len(chunk)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # not reaped yet: the alarm cannot hit another pid
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if results >= 0:
        try:
            os.close(results)
        except OSError:
            pass
    return ended[0], b"".join(chunks) + (_OVER if size > RESULT_BYTES else b"")


def _inodes(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_files - st.f_ffree


def _kill_descendants() -> None:
    """Kill and reap every child; as subreaper, orphaned grandchildren become children in turn."""
    while True:
        children = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == os.getpid():
                        children.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        if not children:
            return
        for child in children:  # not reaped yet: their pids cannot have been reused
            os.kill(child, signal.SIGKILL)
        for child in children:
            os.waitpid(child, 0)


# ---------------------------------------------------------------- sandbox side: the child


def _run_child(given: dict, config: dict, results: int) -> None:
    """In the forked child: lock down, run the program. Then, without tests, write the sentinel if
    it ran to its end; with tests, evaluate their parts and send each value on `results`."""
    import types

    write, exit_ = os.write, os._exit  # kept before the guard and the program can touch them
    try:
        lock_down(config)
    except Exception as e:  # a layer probed to work did not: run nothing rather than run with less
        write(2, f"diversed sandbox: could not lock the program down: {e!r}\n".encode())
        exit_(LOCKDOWN_FAILED)
    with open(PROGRAM_FILE, encoding="utf-8") as f:
        source = f.read()
    if given["tests"] is not None:
        import json  # (before the program runs: it finds the module as it was)

        dumps = json.dumps
    sys.argv = [PROGRAM_FILE]
    _guard(allow_delete=config["contained"], threads=config["threads"])
    try:
        code = compile(source, PROGRAM_FILE, "exec")
        # A fresh __main__ module, as if the program were run as a script (pickle, dataclasses and
        # typing look classes up in sys.modules), not sharing this file's globals.
        main = types.ModuleType("__main__")
        main.__file__ = PROGRAM_FILE
        sys.modules["__main__"] = main
        exec(code, main.__dict__)
        if given["tests"] is not None:
            send = lambda frame: _write_all(results, dumps(frame) + "\n")  # noqa: E731
            _send_parts(given["tests"], main.__dict__, send)
            send([-1, "end", None])  # the program and every test's steps ran to their end
        sys.stdout.flush()
        sys.stderr.flush()
        if given["sentinel"] is not None:
            write(1, f"\n{given['sentinel']}\n".encode())
    except BaseException:  # SystemExit too: exiting early is not passing
        try:  # (the interpreter's own printer: importing traceback needs a file, and it may have none left)
            sys.stdout.flush()
            sys.__excepthook__(*sys.exc_info())
            sys.stderr.flush()
        finally:
            exit_(1)
    exit_(0)


def _write_all(fd: int, text: str) -> None:
    view = memoryview(text.encode("utf-8", "backslashreplace"))
    while view:
        view = view[os.write(fd, view) :]


# ---------------------------------------------------------------- tests: parts sent back, judged apart


class _Unsent(Exception):
    """A test value that is not sent back: not Python's own data, too deep or too big."""


def _send_parts(tests: dict, namespace: dict, send: Callable[[list], None]) -> None:
    """Run each test line's steps after the program (checks.Plan): its statements in the program's
    namespace, its parts evaluated there and sent as [k, "ok", value as plain data] or
    [k, "error", why]. A failing step ends its line: its other parts are sent as errors."""
    budget = [_ITEMS]
    for i, steps in enumerate(tests["steps"]):
        failed = None
        for step in steps:
            if failed is not None:
                if step[0] == "part":
                    send([step[1], "error", failed])
                continue
            try:
                if step[0] == "exec":
                    exec(compile(step[1], f"<test {i + 1}>", "exec"), namespace)
                    continue
                value = eval(compile(step[2], f"<test {i + 1}>", "eval"), namespace)
                send([step[1], "ok", _plain(value, budget, 0)])
            except _Unsent as e:
                send([step[1], "error", f"{step[2]} gave {e}"])
            except BaseException as e:  # SystemExit and KeyboardInterrupt too: the test fails
                sys.__excepthook__(type(e), e, e.__traceback__)
                try:
                    why = f"{type(e).__name__}: {e}"[:300]
                except BaseException:
                    why = "an exception"
                failed = f"{step[1] if step[0] == 'exec' else step[2]} raised {why}"
                if step[0] == "part":
                    send([step[1], "error", failed])


def _plain(value: object, budget: list[int], depth: int) -> object:
    """`value` as JSON-ready plain data, tagged: [tag, payload] for all but None, bool, str, float
    and small ints. Python's own types only (a subclass is sent as its base: its methods never
    reach the judge); iterators are drained. Raises _Unsent for anything else, or past the limits."""
    budget[0] -= 1
    if depth > _TAG_DEPTH or budget[0] < 0:
        raise _Unsent(f"a value nested deeper than {_TAG_DEPTH} or bigger than {_ITEMS} items")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if isinstance(value, int):
        value = int.__int__(value)
        return value if -(1 << 53) < value < (1 << 53) else ["int", hex(value)]
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        value = str.__str__(value)
        budget[0] -= len(value) // 64
        return value
    if isinstance(value, complex):
        value = complex.__complex__(value)
        return ["complex", [value.real, value.imag]]
    if isinstance(value, (bytes, bytearray)):
        budget[0] -= len(value) // 32
        return ["bytearray" if isinstance(value, bytearray) else "bytes", bytes(value).hex()]
    name = f"{kind.__module__}.{kind.__qualname__}"
    tag = _STDLIB.get(name)  # (a class that takes such a name is only read as that type: no harm)
    items = lambda xs: [_plain(x, budget, depth + 1) for x in xs]  # noqa: E731
    pairs = lambda xs: [[_plain(k, budget, depth + 1), _plain(v, budget, depth + 1)] for k, v in xs]  # noqa: E731
    if tag in ("OrderedDict", "Counter", "defaultdict"):
        return [tag, pairs(dict.items(value))]
    if tag == "deque":
        return [tag, [items(value), value.maxlen]]
    if tag == "Fraction":
        return [
            tag,
            [_plain(value.numerator, budget, depth + 1), _plain(value.denominator, budget, depth + 1)],
        ]
    if tag == "Decimal":
        return [tag, type(value).__str__(value)]
    if tag in ("keys", "values", "iter"):
        return [tag, items(value)]
    if tag == "items":
        return [tag, pairs(value)]
    if kind is range:
        return ["range", [value.start, value.stop, value.step]]
    if kind is type and value.__module__ == "builtins":  # int, str, ...: the judge's own
        return ["builtin", value.__qualname__]
    for base in (list, tuple, set, frozenset):
        if isinstance(value, base):
            return [base.__name__, items(base.__iter__(value))]
    if isinstance(value, dict):
        return ["dict", pairs(dict.items(value))]
    if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):  # generators, map, zip, ...
        return ["iter", items(value)]
    # Anything else: only what it is and its truth (which the program decides anyway: it could
    # return True), so `assert f(x)` and `f(x) is not None` hold as they would; it equals nothing.
    return ["object", [name[:200], bool(value)]]


class _Opaque:
    """In the judge, a program's value of a type it does not rebuild: true or false as it was in
    the program, equal only to itself."""

    __slots__ = ("name", "truth")

    def __init__(self, name: str, truth: bool) -> None:
        self.name, self.truth = name, truth

    def __bool__(self) -> bool:
        return self.truth

    def __repr__(self) -> str:
        return f"<a {self.name} object>"


_STDLIB = {
    "collections.OrderedDict": "OrderedDict",
    "collections.Counter": "Counter",
    "collections.defaultdict": "defaultdict",
    "collections.deque": "deque",
    "fractions.Fraction": "Fraction",
    "decimal.Decimal": "Decimal",
    "builtins.dict_keys": "keys",
    "builtins.dict_values": "values",
    "builtins.dict_items": "items",
}


def _rebuild(data: object, depth: int = 0) -> object:
    """The value _plain encoded, rebuilt from the JSON the program's process sent (in the judge)."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if depth > _TAG_DEPTH or type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise ValueError("not a value the sandbox sends")
    tag, payload = data
    items = lambda: [_rebuild(x, depth + 1) for x in payload]  # noqa: E731
    pairs = lambda: [(_rebuild(k, depth + 1), _rebuild(v, depth + 1)) for k, v in payload]  # noqa: E731
    if tag == "int":
        return int(payload, 16)
    if tag == "complex":
        return complex(*(float(x) for x in payload))
    if tag in ("bytes", "bytearray"):
        return (bytes if tag == "bytes" else bytearray).fromhex(payload)
    if tag in ("list", "tuple", "set", "frozenset"):
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items())
    if tag == "iter":
        return iter(items())
    if tag == "keys":
        return dict.fromkeys(items()).keys()
    if tag == "values":
        return dict(enumerate(items())).values()
    if tag in ("dict", "items"):
        return dict(pairs()) if tag == "dict" else dict(pairs()).items()
    if tag == "range":
        return range(*(int.__index__(x) for x in payload))
    import collections

    if tag in ("OrderedDict", "Counter"):
        return getattr(collections, tag)(dict(pairs()) if tag == "Counter" else pairs())
    if tag == "defaultdict":
        return collections.defaultdict(None, pairs())
    if tag == "deque":
        values, maxlen = payload
        return collections.deque([_rebuild(x, depth + 1) for x in values], maxlen)
    if tag == "Fraction":
        import fractions

        return fractions.Fraction(_rebuild(payload[0], depth + 1), _rebuild(payload[1], depth + 1))
    if tag == "Decimal":
        import decimal

        return decimal.Decimal(str(payload))
    if tag == "object":
        return _Opaque(str(payload[0]), payload[1] is True)
    if tag == "builtin":
        import builtins

        found = getattr(builtins, str(payload), None)
        if isinstance(found, type):
            return found
    raise ValueError(f"not a value the sandbox sends (tag {tag[:40]!r})")


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        return "a value"
    return text if len(text) <= 80 else text[:77] + "..."


def _judge_apart(values: bytes, tests: dict, config: dict) -> bytes:
    """Judge the tests in a child of the monitor that never ran the program: locked down like the
    program, with its own builtins and imports. Returns its verdicts (JSON, at most VERDICT_BYTES)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.close(config["status_fd"])  # (the monitor's word to the caller: not the judge's to write)
        try:
            lock_down(config)
            verdicts = _judge(values, tests)
        except BaseException as e:  # one JSON string: every test failed for this reason
            verdicts = f'"the judge failed ({type(e).__name__})"'
        os.write(write, verdicts.encode()[:VERDICT_BYTES])  # fits the pipe: no reader needed yet
        os._exit(0)
    os.close(write)
    ended, _ = _watch(pid, config["timeout"], None)
    os.waitpid(pid, 0)
    os.set_blocking(read, False)
    try:
        out = os.read(read, VERDICT_BYTES)
    except BlockingIOError:
        out = b""
    os.close(read)
    return out if ended == "done" else b'"the judge timed out"'


def _judge(values: bytes, tests: dict) -> str:
    """As JSON, {"ran": whether the program said it ran to its end (the last thing it sends after
    its tests' steps: an early exit is not a pass), "tests": per test line "passed", "failed" or
    "error: why"}: each check evaluated over the rebuilt values of its parts (the first value sent
    for each part counts)."""
    import builtins
    import json

    sent: dict[int, tuple[str, object]] = {}
    over, ran = values.endswith(_OVER), False
    for line in values.split(b"\n"):
        try:
            k, kind, payload = json.loads(line)
        except Exception:
            continue
        ran = ran or (k == -1 and kind == "end")
        if type(k) is not int or k in sent or not 0 <= k < tests["parts"]:
            continue
        try:
            sent[k] = ("ok", _rebuild(payload)) if kind == "ok" else ("error", str(payload)[:300])
        except Exception as e:
            sent[k] = ("error", f"its value could not be read back ({type(e).__name__})")
    base: dict = {"__builtins__": builtins}
    problems = []
    for source in tests["imports"]:
        try:
            exec(source, base)
        except Exception as e:
            problems.append(f"{source} raised {type(e).__name__}: {e}"[:300])
    verdicts, budget = [], VERDICT_BYTES - 64 * (len(tests["checks"]) + 1)
    for steps, checks in zip(tests["steps"], tests["checks"], strict=True):
        parts = [step[1] for step in steps if step[0] == "part"]
        errors = [sent[k][1] for k in parts if k in sent and sent[k][0] == "error"]
        missing = [k for k in parts if k not in sent]
        verdict = "failed"
        if errors:
            verdict = f"error: {errors[0]}"
        elif missing:
            verdict = "error: the program ended before this test's values were sent"
            verdict += f" (more than {RESULT_BYTES} bytes of values)" if over else ""
        else:
            namespace = dict(base)
            namespace.update({f"__dv_{k}__": sent[k][1] for k in parts})
            try:
                if all(eval(check, namespace) for check in checks):
                    verdict = "passed"
                else:
                    gave = [f"{s[2]} gave {_short(sent[s[1]][1])}" for s in steps if s[0] == "part"]
                    verdict = "failed" + (": " + "; ".join(gave) if gave else "")
            except Exception as e:
                verdict = f"error: the check raised {type(e).__name__}: {e}"
                verdict += f" ({problems[0]})" if problems else ""
        verdict = json.dumps(verdict[:300])
        if len(verdict) > budget:  # many long messages: the verdict without its reason
            verdict = json.dumps(json.loads(verdict).split(":")[0])
        budget -= len(verdict)
        verdicts.append(verdict)
    return '{"ran": ' + ("true" if ran else "false") + ', "tests": [' + ",".join(verdicts) + "]}"


def lock_down(config: dict) -> None:
    try:  # the first the kernel's OOM killer picks: before the monitor, the caller or anything else
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    cpu = int(config["timeout"]) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if not config["seccomp"]:  # no new process, and for a non-root user no thread either
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (config["open_files"], config["open_files"]))
    # no real-time scheduling, no higher priority, no POSIX message queue (they outlive the program)
    for name in ("RLIMIT_RTPRIO", "RLIMIT_NICE", "RLIMIT_MSGQUEUE"):
        if hasattr(resource, name):
            resource.setrlimit(getattr(resource, name), (0, 0))
    if not _LINUX:
        return
    monitor = os.getppid()
    prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the monitor
    if os.getppid() != monitor or prctl(38, 1):  # PR_SET_NO_NEW_PRIVS, for Landlock and seccomp
        raise OSError("the monitor is gone, or no_new_privs failed")
    _drop_capabilities()
    if config["landlock"]:
        _install_landlock(**config["landlock"])
    if config["seccomp"]:
        _install_seccomp(allow_delete=config["contained"])


def _drop_capabilities() -> None:
    """Root keeps uid 0 but no capability: no mount, no permission override, no raw socket, no
    ptrace of the non-dumpable monitor or caller."""
    if os.geteuid() == 0:
        for cap in range(64):
            if prctl(24, cap):  # PR_CAPBSET_DROP, until EINVAL past the last capability
                break
        prctl(47, 4)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if _libc().capset(header, (ctypes.c_uint32 * 6)()):  # all sets empty
        raise OSError(ctypes.get_errno(), "capset failed")


# Landlock (<linux/landlock.h>): file-system rights by bit: 0 execute, 1 write_file, 2 read_file,
# 3 read_dir, 4-12 remove and make, 13 refer (ABI 2), 14 truncate (ABI 3), 15 ioctl_dev (ABI 5).
# Network (ABI 4): bind and connect TCP. Scopes (ABI 6): abstract unix sockets, signals.
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446  # the same numbers on every architecture
_LL_EXECUTE, _LL_WRITE, _LL_READ, _LL_READ_DIR, _LL_TRUNCATE, _LL_IOCTL = 1, 2, 4, 8, 1 << 14, 1 << 15
_LL_FILE_RIGHTS = _LL_EXECUTE | _LL_WRITE | _LL_READ | _LL_TRUNCATE | _LL_IOCTL


def landlock_abi() -> int:
    if not _LINUX:
        return 0
    return max(0, _libc().syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))  # _VERSION


def _install_landlock(read: list[str], write: str) -> None:
    """Read-only `read` and /proc/self, read-write `write`, the devices in _DEVICES; no execution."""
    import stat

    abi, libc = landlock_abi(), _libc()
    every = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    every |= _LL_IOCTL if abi >= 5 else 0

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    attr = (ctypes.c_uint64 * 3)(every, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # fs, net, scoped
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_LL_CREATE, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    rules = [(p, _LL_READ | _LL_READ_DIR) for p in [*read, "/proc/self"]]
    rules += [(p, _LL_READ | (_LL_WRITE if mode == "rw" else 0)) for p, mode in _DEVICES.items()]
    rules.append((write, every & ~_LL_EXECUTE))
    try:
        for path, allowed in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this machine
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= _LL_FILE_RIGHTS  # a file takes only the rights that apply to files
                rule = PathBeneath(allowed & every, fd)
                if libc.syscall(_LL_ADD_RULE, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)):
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if libc.syscall(_LL_RESTRICT, ruleset, ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)


# seccomp: "name x86_64 aarch64" from <asm/unistd.h> ("-": no such call on that CPU).
_DENY = """
fork 57 - vfork 58 - execve 59 221 execveat 322 281 setsid 112 157
setpgid 109 154 kill 62 129 tkill 200 130 tgkill 234 131 rt_sigqueueinfo 129 138 rt_tgsigqueueinfo 297 240
pidfd_send_signal 424 424 pidfd_open 434 434 pidfd_getfd 438 438 ptrace 101 117 process_vm_readv 310 270
process_vm_writev 311 271 kcmp 312 272 process_madvise 440 440 process_mrelease 448 448 unshare 272 97
setns 308 268 migrate_pages 256 238 move_pages 279 239 get_robust_list 274 100
mount 165 40 umount2 166 39 pivot_root 155 41 chroot 161 51 open_tree 428 428 move_mount 429 429
fsopen 430 430 fsconfig 431 431 fsmount 432 432 fspick 433 433 mount_setattr 442 442 open_tree_attr 467 467
swapon 167 224 swapoff 168 225 reboot 169 142 sethostname 170 161 setdomainname 171 162 iopl 172 -
ioperm 173 - init_module 175 105 finit_module 313 273 delete_module 176 106 kexec_load 246 104
kexec_file_load 320 294 acct 163 89 quotactl 179 60 quotactl_fd 443 443 settimeofday 164 170
clock_settime 227 112 clock_adjtime 305 266 adjtimex 159 171 syslog 103 116 bpf 321 280
perf_event_open 298 241 userfaultfd 323 282 keyctl 250 219 add_key 248 217 request_key 249 218
vhangup 153 58 fanotify_init 300 262 fanotify_mark 301 263 inotify_init 253 - inotify_init1 294 26
inotify_add_watch 254 27 open_by_handle_at 304 265 name_to_handle_at 303 264 memfd_create 319 279
memfd_secret 447 447
io_uring_setup 425 425 io_uring_enter 426 426 io_uring_register 427 427
socket 41 198 socketpair 53 199 shmget 29 194 shmat 30 196 shmctl 31 195 semget 64 190 semop 65 193
semtimedop 220 192 semctl 66 191 msgget 68 186 msgsnd 69 189 msgrcv 70 188 msgctl 71 187
mq_open 240 180 mq_unlink 241 181 mq_timedsend 242 182 mq_timedreceive 243 183 mq_notify 244 184
mq_getsetattr 245 185
link 86 - linkat 265 37 mknod 133 - mknodat 259 33 truncate 76 45 chmod 90 - fchmod 91 52
fchmodat 268 53 fchmodat2 452 452 chown 92 - fchown 93 55 lchown 94 - fchownat 260 54 utime 132 -
utimes 235 - futimesat 261 - utimensat 280 88 setxattr 188 5 lsetxattr 189 6 fsetxattr 190 7
removexattr 197 14 lremovexattr 198 15 fremovexattr 199 16 setxattrat 463 463 removexattrat 466 466
"""
# Deleting and renaming: denied unless bwrap or Landlock keeps them inside the scratch directory.
_DELETE = "unlink 87 - unlinkat 263 35 rmdir 84 - rename 82 - renameat 264 38 renameat2 316 276"
# Allowed only if every (argument, value, "==" or "!=") holds, low 32 bits: acting on the program
# itself, and no signal sent to another process through a file (F_SETOWN, F_SETSIG, FIOSETOWN).
_CHECKED = {  # name: (x86_64, aarch64, checks)
    "prctl": (157, 167, [(0, 1, "!=")]),  # not PR_SET_PDEATHSIG: it dies with the monitor
    "prlimit64": (302, 261, [(0, 0, "==")]),  # pid 0
    "setpriority": (141, 140, [(0, 0, "=="), (1, 0, "==")]),  # PRIO_PROCESS, who 0
    "sched_setaffinity": (203, 122, [(0, 0, "==")]),
    "sched_setscheduler": (144, 119, [(0, 0, "==")]),
    "sched_setparam": (142, 118, [(0, 0, "==")]),
    "sched_setattr": (314, 274, [(0, 0, "==")]),
    "ioprio_set": (251, 30, [(0, 1, "=="), (1, 0, "==")]),  # IOPRIO_WHO_PROCESS, who 0
    # F_SETOWN, F_SETSIG, F_SETOWN_EX; F_SETLEASE (a lease stalls the caller's open), F_NOTIFY
    "fcntl": (72, 25, [(1, 8, "!="), (1, 10, "!="), (1, 15, "!="), (1, 1024, "!="), (1, 1026, "!=")]),
    "ioctl": (
        16,
        29,
        [(1, 0x8901, "!="), (1, 0x8902, "!="), (1, 0x5412, "!=")]  # FIOSETOWN, SIOCSPGRP, TIOCSTI
        # inode flags and version (FS_IOC_SETFLAGS, FS_IOC_SETVERSION, their 32-bit forms),
        # FS_IOC_FSSETXATTR: a file's owner may set them on files it can only read
        + [(1, nr, "!=") for nr in (0x40086602, 0x40046602, 0x40087602, 0x40047602, 0x401C5820)],
    ),
}
# Threads, not processes: clone only with CLONE_THREAD and no namespace flag; clone3 answers ENOSYS
# (glibc then uses clone). CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
_CLONE = (56, 220)
_CLONE3 = 435
_CLONE_THREAD = 0x10000
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
SECCOMP_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}  # AUDIT_ARCH_*, column


def _syscalls(table: str, column: int) -> dict[str, int]:
    words = table.split()
    rows = zip(words[::3], words[1::3], words[2::3], strict=True)
    return {row[0]: int(row[1 + column]) for row in rows if row[1 + column] != "-"}


def _seccomp_filter(machine: str, allow_delete: bool) -> list[tuple[int, int, int, int]]:
    """The BPF program: EPERM for _DENY (and _DELETE unless `allow_delete`), and for _CHECKED
    where its arguments fail the checks."""
    arch, column = SECCOMP_ARCHES[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    enosys = 0x00050000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
    # (code, jt, jf, k); "deny" and "allow" as jump targets are resolved at the end.
    prog: list[tuple] = [(ld, 0, 0, 4), (jeq, 0, "deny", arch), (ld, 0, 0, 0)]  # .arch, then .nr
    if machine == "x86_64":
        prog.append((jge, "deny", 0, 0x40000000))  # x32 system calls: another way in
    denied = _syscalls(_DENY, column) | ({} if allow_delete else _syscalls(_DELETE, column))
    prog += [(jeq, "deny", 0, nr) for nr in denied.values()]
    prog += [(jeq, "enosys", 0, _CLONE3)]
    jset = 0x45  # BPF_JMP|JSET|K: jump if A & k
    prog += [(jeq, 0, 4, _CLONE[column]), (ld, 0, 0, 16), (jset, 0, "deny", _CLONE_THREAD)]
    prog += [(jset, "deny", 0, _CLONE_NAMESPACES), (ret, 0, 0, allow)]
    for numbers_and_checks in _CHECKED.values():
        body = []
        for arg, value, op in numbers_and_checks[2]:  # seccomp_data.args[arg], low half (little-endian)
            body += [
                (ld, 0, 0, 16 + 8 * arg),
                (jeq, 0, "deny", value) if op == "==" else (jeq, "deny", 0, value),
            ]
        prog += [(jeq, 0, len(body) + 1, numbers_and_checks[column]), *body, (ret, 0, 0, allow)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny), (ret, 0, 0, enosys)]
    labels = {"allow": len(prog) - 3, "deny": len(prog) - 2, "enosys": len(prog) - 1}

    def target(j: int | str, i: int) -> int:
        offset = labels[j] - i - 1 if isinstance(j, str) else j
        assert 0 <= offset < 256, "a seccomp jump is out of range"
        return offset

    return [(code, target(jt, i), target(jf, i), k) for i, (code, jt, jf, k) in enumerate(prog)]


def _install_seccomp(allow_delete: bool) -> None:
    """Install _seccomp_filter for this CPU (no_new_privs is already set)."""

    class SockFilter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    prog = _seccomp_filter(os.uname().machine, allow_delete)
    fprog = SockFprog(len(prog), (SockFilter * len(prog))(*(SockFilter(*ins) for ins in prog)))
    if _libc().prctl(22, ctypes.c_ulong(2), ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)):
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP failed")  # (SECCOMP_MODE_FILTER)


def _guard(allow_delete: bool, threads: int = THREADS) -> None:
    """Replace the usual ways of escaping or doing damage with functions that raise, and refuse a
    thread past `threads` running beside the main one (the kernel bounds what ctypes starts:
    RLIMIT_AS holds each thread's stack, the memory cgroup its kernel memory)."""
    import _socket
    import _thread
    import shutil
    import socket

    count = _thread._count

    def limited(start: Callable[..., object]) -> Callable[..., object]:
        def start_thread(*args: object, **kwargs: object) -> object:
            if count() >= threads:
                raise RuntimeError(f"can't start a new thread: the diversed sandbox allows {threads} at once")
            return start(*args, **kwargs)

        return start_thread

    for name in ("start_new_thread", "start_joinable_thread"):  # (the second: Python 3.13 on)
        if hasattr(_thread, name):
            setattr(_thread, name, limited(getattr(_thread, name)))
            threading = sys.modules.get("threading")
            if threading is not None and hasattr(threading, "_" + name):
                setattr(threading, "_" + name, getattr(_thread, name))

    def refuse(name: str) -> Callable[..., None]:
        def disabled(*args: object, **kwargs: object) -> None:
            raise PermissionError(f"{name}() is disabled in the diversed sandbox")

        return disabled

    posix = (
        "kill killpg fork forkpty setsid setpgid system popen posix_spawn posix_spawnp execv execve "
        "execvp execvpe execl execle execlp execlpe spawnv spawnve spawnvp spawnvpe truncate chmod chown "
        "lchown lchmod fchmod fchown link mknod utime setxattr removexattr pidfd_open"
    ) + ("" if allow_delete else " remove unlink rmdir removedirs rename renames replace")
    for module, names in (
        (os, posix),
        (sys.modules.get("posix") or os, posix),  # the same functions under another name
        (shutil, "chown" if allow_delete else "chown rmtree move"),
        (subprocess, "Popen call run check_call check_output getoutput getstatusoutput"),
        (socket, "socket socketpair create_connection create_server fromfd"),
        (_socket, "socket socketpair"),
        (signal, "pthread_kill raise_signal"),
    ):
        for name in names.split():
            if hasattr(module, name):
                setattr(module, name, refuse(f"{module.__name__}.{name}"))


if __name__ == "__main__":
    main()
