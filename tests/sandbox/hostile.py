"""Hostile programs for the sandbox suite (tests/test_sandbox.py), each an MBPP completion plus its
test lines, run by tests/sandbox/evaluator.py through `MBPP(...).execute()`.

A program "passes" only if its escape worked, so its expected verdict is "failed" (or "timeout")
and the evaluator checks, outside, that nothing happened. Placeholders, filled in by the evaluator:
@CALLER@ (its pid), @PGID@, @MARKER@ (address of a marker buffer in its memory), @SECRET_FD@ (a
file it holds open), @VICTIM@ (a process it started), @OUT@ (its canary directory), @HOME@,
@REPO@ (this repository), @PORT@ / @UDP@ (TCP/UDP listeners on 127.0.0.1), @UNIX@ (a unix socket
path), @ABSTRACT@ (an abstract unix socket name), @TAG@ (config and case, for file names) and
@TOKEN@ (a process name the evaluator looks for after `execute()` returns).

`layers` says which layers close the escape on their own ("guard": the always-on Python guard,
monitor and limits, so every batch runs it; "once": the same, run in one batch only, for cases
that do not depend on the layers): the suite runs a case in every batch that has one of them. The
completion must not have a line starting with `assert`: MBPP cuts completions there.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass

ALL = frozenset({"bwrap", "landlock", "seccomp", "guard"})
ONCE = frozenset({"once"})  # closed by what is always on, whatever the layers: run in the "full" batch only
BWRAP, LANDLOCK, SECCOMP = "bwrap", "landlock", "seccomp"

# Shared by the ctypes programs: libc, raw system calls and a checked call.
PRELUDE = """import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": dict(pidfd_open=434, pidfd_getfd=438, pidfd_send_signal=424, process_vm_readv=310,
                     process_vm_writev=311, prlimit64=302, setsid=112),
      "aarch64": dict(pidfd_open=434, pidfd_getfd=438, pidfd_send_signal=424, process_vm_readv=270,
                      process_vm_writev=271, prlimit64=261, setsid=157)}[os.uname().machine]
def ok(ret):
    if ret < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return True
ONE, ZERO = ctypes.c_ulong(1), ctypes.c_ulong(0)  # unsigned long arguments of a variadic call
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def sockaddr_in(port):
    return (2).to_bytes(2, "little") + port.to_bytes(2, "big") + bytes([127, 0, 0, 1]) + bytes(8)
def sockaddr_un(path):
    return (1).to_bytes(2, "little") + path + bytes(1)
def heartbeat(path):
    libc.prctl(15, b"@TOKEN@", 0, 0, 0)  # PR_SET_NAME: the evaluator looks for it afterwards
    while True:
        try:
            with open(path, "a") as f:
                f.write(".")
        except OSError:
            pass
        time.sleep(0.05)
"""


@dataclass(frozen=True)
class Case:
    name: str
    code: str
    tests: tuple[str, ...] = ("assert escape()",)
    verdict: str | Callable[[frozenset[str]], str] = "failed"
    layers: frozenset[str] = ALL
    prelude: bool = True
    abi: int = 1  # the Landlock ABI that closes it, where Landlock does

    def closed_by(self, active: frozenset[str], abi: int) -> bool:
        """Whether the active layers close this escape on their own."""
        usable = active - ({"landlock"} if abi < self.abi else set())
        return bool({"guard", "once"} & self.layers) or bool(usable & self.layers)

    def program(self) -> str:
        return (PRELUDE if self.prelude else "") + self.code

    def expected(self, active: frozenset[str]) -> str:
        return self.verdict(active) if callable(self.verdict) else self.verdict


def token(run: str, name: str) -> str:
    """The process name a case's program takes; `run` keeps it apart from other runs' programs."""
    return "dv" + hashlib.sha1(f"{run}/{name}".encode()).hexdigest()[:12]  # comm: 15 bytes at most


def _escape(body: str) -> str:
    return "def escape():\n" + "".join(f"    {line}\n" for line in body.strip("\n").splitlines())


def ipc_key(tag: str) -> int:
    """The SysV key sysv_shared_memory creates (the same computation as in the program)."""
    return int.from_bytes(hashlib.sha1(tag.encode()).digest()[:4], "little") & 0x7FFFFFFF


def _tmp_verdict(active: frozenset[str]) -> str:
    # Under bwrap alone /tmp is the sandbox's own: the write works, and stays there.
    return "failed" if "landlock" in active else "passed"


MEMFD = """
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1:] * 2)
for i in range(64):
    fd = libc.memfd_create(b"x", 0)
    ok(fd)
    {fill}
return True"""
NOT_LANDLOCK = frozenset({BWRAP, SECCOMP})
FILES = frozenset({BWRAP, LANDLOCK})
CANARY = "@OUT@/canary.txt"

CASES = [
    # -- the caller's memory, environment and file descriptors
    Case(
        "mem_write_caller",
        _escape("""
with open("/proc/@CALLER@/mem", "r+b", buffering=0) as f:
    f.seek(@MARKER@)
    f.write(b"PWNED")
return True"""),
    ),
    Case(
        "mem_write_grandparent",
        _escape("""
def ppid(pid):
    return int(open(f"/proc/{pid}/status").read().split("PPid:")[1].split()[0])
with open(f"/proc/{ppid(ppid(os.getpid()))}/mem", "r+b", buffering=0) as f:
    f.seek(@MARKER@)
    f.write(b"PWNED")
return True"""),
    ),
    Case(
        "mem_read_caller",
        _escape("""
with open("/proc/@CALLER@/mem", "rb", buffering=0) as f:
    f.seek(@MARKER@)
    return b"INTACT" in f.read(17)"""),
    ),
    Case(
        "process_vm_readv",
        _escape("""
buf = ctypes.create_string_buffer(17)
local, remote = iovec(ctypes.addressof(buf), 17), iovec(@MARKER@, 17)
n = libc.syscall(NR["process_vm_readv"], @CALLER@, ctypes.byref(local), ONE, ctypes.byref(remote), ONE, ZERO)
return n == 17 and b"INTACT" in buf.raw"""),
    ),
    Case(
        "process_vm_writev",
        _escape("""
buf = ctypes.create_string_buffer(b"PWNED")
local, remote = iovec(ctypes.addressof(buf), 5), iovec(@MARKER@, 5)
n = libc.syscall(NR["process_vm_writev"], @CALLER@, ctypes.byref(local), ONE, ctypes.byref(remote), ONE, ZERO)
return n == 5"""),
    ),
    Case(
        "ptrace_seize_caller",
        _escape("""
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
ok(libc.ptrace(0x4206, @CALLER@, None, None))  # PTRACE_SEIZE: does not stop the caller
libc.ptrace(17, @CALLER@, None, None)  # PTRACE_DETACH
return True"""),
    ),
    Case(
        "environ_caller",
        _escape("""
data = open("/proc/@CALLER@/environ", "rb").read()
print(data.decode(errors="replace"))
return b"DVX_SECRET=" in data"""),
    ),
    Case(
        "environ_scan",
        _escape("""
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        data = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    if b"DVX_SECRET=" in data:
        print(data.decode(errors="replace"))
        return True
return False"""),
        layers=FILES,
    ),
    Case("maps_caller", _escape('return len(open("/proc/@CALLER@/maps").read()) > 0')),
    Case(
        "fd_through_proc",
        _escape("""
print(open("/proc/@CALLER@/fd/@SECRET_FD@").read())
with open("/proc/@CALLER@/fd/@SECRET_FD@", "a") as f:
    f.write("PWNED")
return True"""),
    ),
    Case(
        "pidfd_getfd",
        _escape("""
pidfd = libc.syscall(NR["pidfd_open"], @CALLER@, 0)
ok(pidfd)
fd = libc.syscall(NR["pidfd_getfd"], pidfd, @SECRET_FD@, 0)
ok(fd)
os.write(fd, b"PWNED")
return True"""),
    ),
    # -- signals and other processes
    Case("signal_caller", _escape("return ok(libc.kill(@CALLER@, 10))"), abi=6),  # SIGUSR1
    Case("sigqueue_caller", _escape("return ok(libc.sigqueue(@CALLER@, 10, ctypes.c_void_p(0)))"), abi=6),
    Case("signal_caller_group", _escape("return ok(libc.kill(-@PGID@, 10))"), abi=6),
    Case("kill_victim", _escape("return ok(libc.kill(@VICTIM@, 9))"), abi=6),
    Case("kill_victim_os", _escape("os.kill(@VICTIM@, 9)\nreturn True")),
    Case(
        "kill_victim_pidfd",
        _escape("""
pidfd = libc.syscall(NR["pidfd_open"], @VICTIM@, 0)
ok(pidfd)
return ok(libc.syscall(NR["pidfd_send_signal"], pidfd, 9, None, 0))"""),
        abi=6,
    ),
    Case(
        "sigio_caller",
        _escape("""
r, w = os.pipe()
ok(libc.fcntl(r, 8, @CALLER@))  # F_SETOWN: I/O on r signals the caller
ok(libc.fcntl(r, 10, 10))  # F_SETSIG: SIGUSR1
ok(libc.fcntl(r, 4, libc.fcntl(r, 3) | 0o20000))  # F_SETFL: O_ASYNC
os.write(w, b"x")
time.sleep(0.2)
return True"""),
        abi=6,
        verdict=lambda active: "failed" if active & {"bwrap", "seccomp"} else "passed",
    ),
    Case(  # sets the flags it read (nothing changes if it works); root owns the interpreter
        "inode_flags",
        _escape("""
import fcntl
fd = os.open(os.path.realpath(sys.executable), os.O_RDONLY)
flags = fcntl.ioctl(fd, 0x80086601, bytes(8))  # FS_IOC_GETFLAGS
fcntl.ioctl(fd, 0x40086602, flags)  # FS_IOC_SETFLAGS
return True"""),
        layers=frozenset({BWRAP, SECCOMP}),
    ),
    Case(  # a read lease: a process opening the file for writing would wait for the program
        "file_lease",
        _escape("""
import fcntl
fd = os.open(os.path.realpath(sys.executable), os.O_RDONLY)
fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)  # F_SETLEASE
return True"""),
        layers=frozenset({SECCOMP}),
    ),
    Case("kill_monitor", _escape("ok(libc.kill(os.getppid(), 9))\ntime.sleep(1)\nreturn True")),
    Case(
        "prlimit_caller",
        _escape("""
limit = (ctypes.c_uint64 * 2)(16, 16)
return ok(libc.syscall(NR["prlimit64"], @CALLER@, 7, ctypes.byref(limit), None))"""),
        layers=NOT_LANDLOCK,
    ),
    Case("renice_caller", _escape("return ok(libc.setpriority(0, @CALLER@, 19))"), layers=NOT_LANDLOCK),
    # -- files outside the scratch directory
    Case("write_canary", _escape(f'open("{CANARY}", "w").write("PWNED")\nreturn True'), layers=FILES),
    Case(
        "posix_write",
        _escape(f"""
import posix
fd = posix.open("{CANARY}", posix.O_WRONLY | posix.O_APPEND)
posix.write(fd, b"PWNED")
return True"""),
        layers=FILES,
    ),
    Case(
        "append_package_init",
        _escape("""
with open("@OUT@/project/pkg/__init__.py", "a") as f:
    f.write("open('@OUT@/ran-@TAG@', 'w')\\n")
return True"""),
        layers=FILES,
    ),
    Case(
        "truncate_readme", _escape('open("@OUT@/project/README.md", "w").close()\nreturn True'), layers=FILES
    ),
    Case("truncate_ctypes", _escape('return ok(libc.truncate(b"@OUT@/project/README.md", 0))'), abi=3),
    Case(
        "forge_results",
        _escape("""
with open("@OUT@/results.jsonl", "a") as f:
    f.write('{"task_id": 1, "passed": true}\\n')
return True"""),
        layers=FILES,
    ),
    Case("chmod_posix", _escape(f'import posix\nposix.chmod("{CANARY}", 0)\nreturn True')),
    Case("chmod_ctypes", _escape(f'return ok(libc.chmod(b"{CANARY}", 0))'), layers=NOT_LANDLOCK),
    Case("chown_ctypes", _escape(f'return ok(libc.chown(b"{CANARY}", 4242, 4242))'), layers=NOT_LANDLOCK),
    Case("utime_ctypes", _escape(f'return ok(libc.utimes(b"{CANARY}", None))'), layers=NOT_LANDLOCK),
    Case(
        "setxattr_ctypes",
        _escape(f'return ok(libc.setxattr(b"{CANARY}", b"user.dvx", b"1", 1, 0))'),
        layers=NOT_LANDLOCK,
    ),
    Case("unlink_ctypes", _escape('return ok(libc.unlink(b"@OUT@/victim.txt"))')),
    Case("rename_ctypes", _escape('return ok(libc.rename(b"@OUT@/victim.txt", b"@OUT@/renamed-@TAG@"))')),
    Case(
        "symlink_write",
        _escape(f'os.symlink("{CANARY}", "link")\nopen("link", "a").write("PWNED")\nreturn True'),
        layers=FILES,
    ),
    Case(
        "hardlink_write",
        _escape(f'ok(libc.link(b"{CANARY}", b"hard"))\nopen("hard", "a").write("PWNED")\nreturn True'),
    ),
    Case(
        "create_in_tmp",
        _escape('open("/tmp/dvx-@TAG@", "w").write("x")\nreturn True'),
        verdict=_tmp_verdict,
        layers=FILES,
    ),
    Case(
        "create_in_dev_shm", _escape('open("/dev/shm/dvx-@TAG@", "w").write("x")\nreturn True'), layers=FILES
    ),
    Case("create_in_home", _escape('open("@HOME@/dvx-@TAG@", "w").write("x")\nreturn True'), layers=FILES),
    Case("read_repository", _escape('return len(open("@REPO@/pyproject.toml").read()) > 0'), layers=FILES),
    Case(
        "read_token_file",
        _escape("""
print(open("@HOME@/.cache/huggingface/token").read())
return True"""),
        layers=FILES,
    ),
    Case(
        "open_core_pattern",
        _escape('os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))\nreturn True'),
        layers=FILES,
    ),
    Case("mount_tmpfs", _escape('return ok(libc.mount(b"none", b"@OUT@", b"tmpfs", 0, None))')),
    # -- running binaries
    Case(
        "execv_ctypes",
        _escape("""
argv = (ctypes.c_char_p * 4)(b"/bin/sh", b"-c", b"echo ESCAPED-@TAG@", None)
libc.execv(b"/bin/sh", argv)
return False"""),
        layers=frozenset({LANDLOCK, SECCOMP}),
    ),
    Case(
        "execv_touch",
        _escape("""
argv = (ctypes.c_char_p * 3)(b"touch", b"@OUT@/ran-@TAG@", None)
libc.execv(b"/usr/bin/touch", argv)
return False"""),
    ),
    Case(
        "execv_posix",
        _escape('import posix\nposix.execv("/bin/sh", ["sh", "-c", "touch @OUT@/ran-@TAG@"])\nreturn False'),
    ),
    Case("system_ctypes", _escape('return libc.system(b"touch @OUT@/ran-@TAG@") == 0')),
    # -- the network
    Case(
        "tcp_socket_module",
        _escape('import socket\nsocket.create_connection(("127.0.0.1", @PORT@), 1)\nreturn True'),
    ),
    Case(
        "tcp_ctypes",
        _escape("""
s = libc.socket(2, 1, 0)
ok(s)
ok(libc.connect(s, sockaddr_in(@PORT@), 16))
return ok(libc.send(s, b"ESCAPED", 7, 0))"""),
        abi=4,
    ),
    Case(
        "udp_ctypes",
        _escape("""
s = libc.socket(2, 2, 0)
ok(s)
return ok(libc.sendto(s, b"ESCAPED", 7, 0, sockaddr_in(@UDP@), 16))"""),
        layers=NOT_LANDLOCK,
        verdict=lambda active: "failed" if "seccomp" in active else "passed",
    ),  # bwrap: sent into its own lo
    Case(
        "unix_path_ctypes",
        _escape("""
s = libc.socket(1, 1, 0)
ok(s)
address = sockaddr_un(b"@UNIX@")
return ok(libc.connect(s, address, len(address)))"""),
        layers=NOT_LANDLOCK,
    ),
    Case(
        "unix_abstract_ctypes",
        _escape("""
s = libc.socket(1, 1, 0)
ok(s)
address = sockaddr_un(b"\\0@ABSTRACT@")[:-1]
return ok(libc.connect(s, address, len(address)))"""),
        abi=6,
    ),
    Case(
        "sysv_shared_memory",
        _escape("""
import hashlib
key = int.from_bytes(hashlib.sha1(b"@TAG@").digest()[:4], "little") & 0x7FFFFFFF
return ok(libc.shmget(key, 4096, 0o1600))"""),
        layers=NOT_LANDLOCK,
        verdict=lambda active: "failed" if "seccomp" in active else "passed",
    ),  # bwrap: its own IPC namespace
    # -- outliving the run
    Case(
        "setsid_ctypes",
        "libc.syscall(NR['setsid'])\nheartbeat('@OUT@/hb-@TAG@')\n",
        tests=(),
        verdict="timeout",
    ),
    Case(
        "setsid_posix",
        "import posix\ntry:\n    posix.setsid()\nexcept OSError:\n    pass\nheartbeat('@OUT@/hb-@TAG@')\n",
        tests=(),
        verdict="timeout",
    ),
    Case("setpgid_ctypes", "libc.setpgid(0, 0)\nheartbeat('@OUT@/hb-@TAG@')\n", tests=(), verdict="timeout"),
    Case(
        "fork_daemon",
        """pid = libc.fork()
if pid == 0:
    libc.syscall(NR["setsid"])
    heartbeat("@OUT@/hb-@TAG@")
os._exit(0)
""",
        tests=("assert False",),
    ),
    Case(
        "double_fork_daemon",
        """if libc.fork() == 0:
    if libc.fork() == 0:
        libc.syscall(NR["setsid"])
        heartbeat("@OUT@/hb-@TAG@")
    os._exit(0)
time.sleep(0.5)
""",
        tests=("assert False",),
    ),
    Case("fork_bomb", "while True:\n    os.fork()\n", tests=()),
    Case(
        "fork_bomb_ctypes",
        """while True:
    pid = libc.fork()
    if pid < 0:
        raise OSError("fork failed")
    if pid == 0:
        time.sleep(30)
        os._exit(0)
""",
        tests=(),
        layers=frozenset({SECCOMP}),
    ),
    Case(  # threads are allowed (the correct_threads case), not a flood of them
        "thread_flood",
        "import threading\nfor i in range(100):\n"
        "    threading.Thread(target=time.sleep, args=(30,)).start()\n",
        tests=(),
    ),
    Case(  # the Python guard's count does not see these: the address space (stacks) bounds them
        "thread_flood_ctypes",
        """start = ctypes.cast(libc.sleep, ctypes.c_void_p)
libc.prctl(15, b"@TOKEN@", 0, 0, 0)
for i in range(100_000):
    t = ctypes.c_ulong()
    err = libc.pthread_create(ctypes.byref(t), None, start, ctypes.c_void_p(30))
    if err:
        raise OSError(err, f"thread {i}")
""",
        tests=(),
    ),
    # -- resources
    Case("infinite_loop", "while True:\n    pass\n", tests=(), verdict="timeout", prelude=False, layers=ONCE),
    Case(
        "sleep_forever",
        "import time\ntime.sleep(1000)\n",
        tests=(),
        verdict="timeout",
        prelude=False,
        layers=ONCE,
    ),
    Case("allocate_10gb", "x = bytearray(10 * 2**30)\nx[-1] = 1\n", tests=(), prelude=False, layers=ONCE),
    Case("print_100mb", "print('x' * 100_000_000)\n", tests=(), prelude=False, layers=ONCE),
    # memory RLIMIT_AS does not count: holding many open files passes; RLIMIT_NOFILE (32, hard) stops them
    Case("memfd_fallocate", _escape(MEMFD.format(fill="os.posix_fallocate(fd, 0, 2**20)"))),
    Case("memfd_write", _escape(MEMFD.format(fill="os.write(fd, bytes(2**20))"))),
    Case(
        "pipe_buffers",
        _escape("""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1:] * 2)
for i in range(256):  # 64 KiB each (pipe-user-pages-soft keeps F_SETPIPE_SZ from making them bigger)
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.write(w, bytes(2**16))
return True"""),
    ),
    Case(
        "inode_flood",
        _escape("""
for i in range(200_000):
    open(f"f{i}", "w").close()
return True"""),
        layers=frozenset({BWRAP}),
    ),
    Case(
        "inode_flood_tmp",
        _escape("""
for i in range(200_000):
    os.mkdir(f"/tmp/d{i}")
return True"""),
        layers=frozenset({BWRAP}),
    ),
    Case(
        "inotify_watch",
        _escape("""
fd = libc.inotify_init1(0)
ok(fd)
return ok(libc.inotify_add_watch(fd, b"@OUT@", 0x100))  # IN_CREATE: new files' names"""),
        layers=NOT_LANDLOCK,
    ),
    Case(
        "fill_scratch",
        """wrote = 0
for i in range(6):
    with open(f"big{i}", "wb") as f:
        f.write(bytes(16 * 2**20 - 1))
    wrote += 1
""",
        tests=("assert wrote == 6",),
        layers=frozenset({BWRAP}),
        prelude=False,
    ),
    # -- verdict games: ending early or hiding a failure does not pass
    Case("lone_surrogate", "x = '\udcff'\n", tests=(), prelude=False, layers=ONCE),  # cannot be written out
    Case("exit_0_early", "import os\nos._exit(0)\n", tests=("assert False",), prelude=False, layers=ONCE),
    Case("sys_exit_0", "import sys\nsys.exit(0)\n", tests=("assert False",), prelude=False, layers=ONCE),
    Case(
        "fake_sentinel",
        "import os\nprint('\\n' + 'f' * 32)\nos._exit(0)\n",
        tests=(),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "atexit_exit_0",
        "import atexit, os\natexit.register(os._exit, 0)\n",
        tests=("assert False",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "excepthook",
        "import sys\nsys.excepthook = lambda *a: None\n",
        tests=("assert False",),
        prelude=False,
        layers=ONCE,
    ),
    Case("keyboard_interrupt", "raise KeyboardInterrupt\n", tests=(), prelude=False, layers=ONCE),
    Case("abort", "import os\nos.abort()\n", tests=(), prelude=False, layers=ONCE),
    Case("segfault", "import ctypes\nctypes.string_at(0)\n", tests=(), prelude=False, layers=ONCE),
    Case(
        "close_stdout",  # no longer a way out: the verdict does not travel on stdout
        "import os\nos.close(1)\nos.close(2)\n",
        tests=("assert True",),
        verdict="passed",
        prelude=False,
        layers=ONCE,
    ),
    # -- forged verdicts: a wrong program (add(1, 2) is not 3) that tries to pass anyway
    Case(
        "forge_sentinel_from_frames",
        """import os, re, sys
def add(a, b):
    frame, found = sys._getframe(), []
    while frame is not None:  # any 32-character hex string in any caller's locals
        values = frame.f_locals.values()
        found += [v for v in values if isinstance(v, str) and re.fullmatch("[0-9a-f]{32}", v)]
        frame = frame.f_back
    for value in found:
        os.write(1, ("\\n%s\\n" % value).encode())
    os._exit(0)
""",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_stdout_flush",
        """import os, sys
class Out:
    def write(self, text):
        return len(text)
    def flush(self):
        for value in sys._getframe(1).f_locals.values():
            if isinstance(value, str) and len(value) == 32:
                os.write(1, ("\\n%s\\n" % value).encode())
                os._exit(0)
sys.stdout = Out()
def add(a, b):
    return 0
""",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_equal_to_everything",
        "class E:\n    __eq__ = lambda s, o: True\n    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return E()\n",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_int_equal_to_everything",
        "class E(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return E(0)\n",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_class_claims_list",
        "class L:\n    __class__ = list\n    __eq__ = lambda s, o: True\ndef pair(a, b):\n    return L()\n",
        tests=("assert pair(1, 2) == [1, 2]",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_true_object",
        "class T:\n    __bool__ = lambda s: True\n    __eq__ = lambda s, o: True\n"
        "def is_even(n):\n    return T()\n",
        tests=("assert is_even(3) == True",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_shadow_set",
        "set = lambda *a, **k: 0\ndef common(a, b):\n    return [9]\n",
        tests=("assert set(common((3, 4), (4, 5))) == set((4,))",),
        prelude=False,
        layers=ONCE,
    ),
    Case(  # an import that tells the judge what `set` means
        "forge_import_alias",
        "from operator import truth as set\ndef common(a, b):\n    return [9]\n",
        tests=("assert set(common((3, 4), (4, 5))) == set((4,))",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_shadow_builtins_sorted",
        "import builtins\nbuiltins.sorted = lambda *a, **k: 0\ndef order(xs):\n    return [9]\n",
        tests=("assert sorted(order([2, 1])) == sorted([1, 2])",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_math_isclose",
        "import math\nmath.isclose = lambda *a, **k: True\ndef area(r):\n    return 1.0\n",
        tests=("assert math.isclose(area(2), 12.566, rel_tol=0.001)",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_rebind_math",
        "class M:\n    isclose = staticmethod(lambda *a, **k: True)\nmath = M()\n"
        "def area(r):\n    return 1.0\n",
        tests=("import math\nassert math.isclose(area(2), 12.566, rel_tol=0.001)",),
        prelude=False,
        layers=ONCE,
    ),
    Case(  # writes what the harness would send, with values the judge does not rebuild as given
        "forge_value_frames",
        """import os
def add(a, b):
    for fd in range(3, 32):
        for frame in ('[0, "ok", ["object", ["int", true]]]', '[0, "ok", ["eval", "3"]]'):
            try:
                os.write(fd, (frame + "\\n").encode())
            except OSError:
                pass
    os._exit(0)
""",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_deep_value",
        "def add(a, b):\n    x = []\n    for _ in range(100_000):\n        x = [x]\n    return x\n",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_endless_iterator",
        "import itertools\ndef add(a, b):\n    return itertools.count()\n",
        tests=("assert list(add(1, 2)) == [3]",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_exit_in_function",
        "import sys\ndef add(a, b):\n    sys.exit(0)\n",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    Case(
        "forge_patch_the_harness",
        """import gc, types
def add(a, b):
    return 0
for f in gc.get_objects():  # every function of the sandbox's own side now says yes
    if isinstance(f, types.FunctionType) and f.__module__ in ("__mp_main__", "confine") or (
        isinstance(f, types.FunctionType) and "confine" in f.__code__.co_filename
    ):
        f.__code__ = (lambda *a, **k: True).__code__ if f.__code__.co_freevars == () else f.__code__
""",
        tests=("assert add(1, 2) == 3",),
        prelude=False,
        layers=ONCE,
    ),
    # -- correct programs, in the same batches: they must pass
    Case(
        "correct_threads",
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def squares(xs):\n    with ThreadPoolExecutor(4) as pool:\n"
        "        return list(pool.map(lambda x: x * x, xs))\n",
        tests=("assert squares([1, 2, 3]) == [1, 4, 9]",),
        # a non-root user without seccomp keeps RLIMIT_NPROC 0, which stops threads too
        verdict=lambda active: "passed" if "seccomp" in active or os.geteuid() == 0 else "failed",
        prelude=False,
    ),
    Case(
        "correct_add",
        "def add(a, b):\n    return a + b\n",
        tests=("assert add(1, 2) == 3",),
        verdict="passed",
        prelude=False,
    ),
    Case(
        "correct_script_like",
        "import dataclasses, pickle, typing\n@dataclasses.dataclass\nclass P:\n    x: int\n"
        "same = pickle.loads(pickle.dumps(P(1))) == P(1)\nhints = typing.get_type_hints(P)\n",
        tests=("assert same", "assert hints == {'x': int}"),
        verdict="passed",
        prelude=False,
    ),
    Case(
        "correct_stdlib",
        "import re, math, heapq, collections, itertools, datetime, json, random, cmath\n"
        "now = datetime.datetime.now()\n",
        tests=("assert now.year > 2000",),
        verdict="passed",
        prelude=False,
    ),
    Case(
        "correct_no_secrets",
        "import os\n",
        tests=("assert 'DVX_SECRET' not in os.environ",),
        verdict="passed",
        prelude=False,
    ),
    Case(
        "correct_tempfile",
        "import tempfile\nwith tempfile.TemporaryDirectory() as d:\n    open(d + '/x', 'w').write('1')\n",
        tests=("assert True",),
        verdict="passed",
        layers=FILES,
        prelude=False,
    ),
]
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES)
