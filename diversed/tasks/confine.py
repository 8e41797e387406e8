"""The sandbox's own side: the monitor and the child's lock-down, run as a script.

`execution.run_program` starts this file as `python -I -B -S confine.py <config>` (inside bubblewrap
where it can), so it must stay runnable with the standard library only and import nothing from
`diversed` (`-I` does not put the package on the path). `main` is the *monitor*: it forks once,
enforces the timeout (and under bwrap the most files), kills and reaps whatever the program left,
reports on a pipe the program never holds and exits with the program's status. The child locks itself
down (resource limits, no_new_privs, no capability, Landlock, seccomp: `lock_down`), installs the
Python guard and runs the program, writing the sentinel only if its last line ran.

`execution.py` says which layer closes which escape and what stays open; this file only applies
them. It does not choose the layers (the caller probes the machine and passes its choice).
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
    sentinel = sys.stdin.readline().strip()
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        _run_child(sentinel, config)
    ended = _watch(pid, config["timeout"], config["files"])
    _, status = os.waitpid(pid, 0)
    if _LINUX and not config["seccomp"]:  # (with seccomp, the program cannot start processes)
        _kill_descendants()
    os.write(status_fd, f"{ended}\n".encode())
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell says


def _watch(pid: int, timeout: float, files: tuple[list[str], int] | None) -> str:
    """Wait for the child, killing it at the timeout or, if `files` = (paths, most), once the file
    systems at those paths (the sandbox's own tmpfs) hold more than `most` inodes, checked every
    20 ms: tmpfs has no inode limit bwrap can set, and each one is kernel memory. Returns "done",
    "timeout" or "files"; the child is not reaped yet."""
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

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(timeout, 0.02) if files else timeout, 0.02 if files else 0)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # not reaped yet: the alarm cannot hit another pid
    signal.setitimer(signal.ITIMER_REAL, 0)
    return ended[0]


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


def _run_child(sentinel: str, config: dict) -> None:
    """In the forked child: lock down, run the program, write the sentinel if it ran to its end."""
    import types

    write, exit_ = os.write, os._exit  # kept before the guard and the program can touch them
    try:
        lock_down(config)
    except Exception as e:  # a layer probed to work did not: run nothing rather than run with less
        write(2, f"diversed sandbox: could not lock the program down: {e!r}\n".encode())
        exit_(LOCKDOWN_FAILED)
    with open(PROGRAM_FILE, encoding="utf-8") as f:
        source = f.read()
    sys.argv = [PROGRAM_FILE]
    _guard(allow_delete=config["contained"])
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
        write(1, f"\n{sentinel}\n".encode())
    except BaseException:  # SystemExit too: exiting early is not passing
        try:  # (the interpreter's own printer: importing traceback needs a file, and it may have none left)
            sys.stdout.flush()
            sys.__excepthook__(*sys.exc_info())
            sys.stderr.flush()
        finally:
            exit_(1)
    exit_(0)


def lock_down(config: dict) -> None:
    try:  # the first the kernel's OOM killer picks: before the monitor, the caller or anything else
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    cpu = int(config["timeout"]) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
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
clone 56 220 fork 57 - vfork 58 - clone3 435 435 execve 59 221 execveat 322 281 setsid 112 157
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
    "fcntl": (72, 25, [(1, 8, "!="), (1, 10, "!="), (1, 15, "!=")]),  # F_SETOWN, F_SETSIG, F_SETOWN_EX
    "ioctl": (
        16,
        29,
        [(1, 0x8901, "!="), (1, 0x8902, "!="), (1, 0x5412, "!=")],
    ),  # FIOSETOWN, SIOCSPGRP, TIOCSTI
}
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
    # (code, jt, jf, k); "deny" and "allow" as jump targets are resolved at the end.
    prog: list[tuple] = [(ld, 0, 0, 4), (jeq, 0, "deny", arch), (ld, 0, 0, 0)]  # .arch, then .nr
    if machine == "x86_64":
        prog.append((jge, "deny", 0, 0x40000000))  # x32 system calls: another way in
    denied = _syscalls(_DENY, column) | ({} if allow_delete else _syscalls(_DELETE, column))
    prog += [(jeq, "deny", 0, nr) for nr in denied.values()]
    for numbers_and_checks in _CHECKED.values():
        body = []
        for arg, value, op in numbers_and_checks[2]:  # seccomp_data.args[arg], low half (little-endian)
            body += [
                (ld, 0, 0, 16 + 8 * arg),
                (jeq, 0, "deny", value) if op == "==" else (jeq, "deny", 0, value),
            ]
        prog += [(jeq, 0, len(body) + 1, numbers_and_checks[column]), *body, (ret, 0, 0, allow)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    labels = {"allow": len(prog) - 2, "deny": len(prog) - 1}

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


def _guard(allow_delete: bool) -> None:
    """Replace the usual ways of escaping or doing damage with functions that raise."""
    import _socket
    import shutil
    import socket

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
