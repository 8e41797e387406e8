"""The caller in the hostile suite: a process with a secret in its environment, a marker in its
memory, canary files, a victim process and listeners, that runs cases from hostile.py through
`MBPP(...).execute()` and reports, as JSON on stdout, the verdicts and what escaped.

Run by tests/test_sandbox.py as `python evaluator.py SPEC`, SPEC a JSON file:
{"config": name, "cases": [names], "out": empty dir, "repo": path, "timeout": s, "workers": n,
"require": [layers that must be enforced]}. DIVERSED_SANDBOX picks the layers, DVX_SECRET is set.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import hostile

from diversed.tasks import confine, execution
from diversed.tasks.mbpp import MBPP

MARKER = b"DVX-MARKER-INTACT"


def snapshot(root: Path) -> dict[str, list]:
    """Every file under `root`: content hash, mode, owner, mtime, xattrs."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_socket() or path.name.startswith("hb-"):  # heartbeats are looked at apart
            continue
        digest = (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        )
        xattrs = sorted(os.listxattr(path, follow_symlinks=False)) if not path.is_symlink() else []
        out[str(path.relative_to(root))] = [digest, st.st_mode, st.st_uid, st.st_mtime_ns, xattrs]
    return out


def alive(tokens: dict[str, str]) -> list[str]:
    """The cases whose process name (set by the hostile program) a live process has."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if comm in tokens and state not in ("Z", "X"):
            found.append(tokens[comm])
    return found


def setup(out: Path, home: Path) -> None:
    (out / "project" / "pkg").mkdir(parents=True)
    (out / "project" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (out / "project" / "README.md").write_text("# project\n")
    (out / "canary.txt").write_text("still here\n")
    (out / "victim.txt").write_text("delete me if you can\n")
    (out / "results.jsonl").write_text('{"task_id": 1, "passed": false}\n')
    (out / "secret-fd.txt").write_text("fd secret\n")
    (home / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)
    (home / ".cache" / "huggingface" / "token").write_text(os.environ["DVX_SECRET"] + "-file\n")


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out, config = Path(spec["out"]), spec["config"]
    home = Path(os.environ["HOME"])
    setup(out, home)
    marker = ctypes.create_string_buffer(MARKER)
    usr1: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *_: usr1.append(1))
    victim = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    atexit.register(victim.kill)  # a crash here must not leave the test waiting on it
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(out / "unix.sock"))
    unix.listen()
    abstract_name = f"dvx-{os.getpid()}-{config}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    secret_fd = os.open(out / "secret-fd.txt", os.O_RDWR)
    nofile, nice = resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, 0)
    mounts = Path("/proc/self/mountinfo").read_text()
    before = snapshot(out)
    subs = {
        "@CALLER@": str(os.getpid()),
        "@PGID@": str(os.getpgid(0)),
        "@MARKER@": str(ctypes.addressof(marker)),
        "@SECRET_FD@": str(secret_fd),
        "@VICTIM@": str(victim.pid),
        "@OUT@": str(out),
        "@HOME@": str(home),
        "@REPO@": spec["repo"],
        "@PORT@": str(tcp.getsockname()[1]),
        "@UDP@": str(udp.getsockname()[1]),
        "@UNIX@": str(out / "unix.sock"),
        "@ABSTRACT@": abstract_name,
    }
    cases = [hostile.BY_NAME[name] for name in spec["cases"]]
    run = f"{config}/{os.getpid()}/{time.time()}"
    tokens = {hostile.token(run, c.name): c.name for c in cases}

    def fill(text: str, case: hostile.Case) -> str:
        for key, value in {
            **subs,
            "@TAG@": f"{config}-{case.name}",
            "@TOKEN@": hostile.token(run, case.name),
        }.items():
            text = text.replace(key, value)
        assert not re.search(r"@[A-Z_]+@", text), f"{case.name}: a placeholder is left"
        return text

    examples = [
        {
            "task_id": i,
            "text": c.name,
            "code": "",
            "test_list": [fill(t, c) for t in c.tests],
            "test_setup_code": "",
        }
        for i, c in enumerate(cases)
    ]
    completions = [fill(c.program(), c) for c in cases]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layers = execution.sandbox_layers()
        active = sorted(name for name, why in layers.items() if why is None)
        missing = set(spec["require"]) - set(active)
        if missing:
            print(json.dumps({"error": f"layers not enforced: {sorted(missing)}", "layers": layers}))
            return
        task = MBPP(examples, allow_code_execution=True, timeout=spec["timeout"], workers=spec["workers"])
        start = time.monotonic()
        results = task.execute(examples, completions)
        seconds = time.monotonic() - start
    left_alive = alive(tokens)  # right after execute() returned: nothing may still run
    beats = {p.name: p.stat().st_size for p in out.glob("hb-*")}
    time.sleep(0.5)
    beats_after = {p.name: p.stat().st_size for p in out.glob("hb-*")}

    def accepted(sock: socket.socket) -> bool:
        sock.setblocking(False)
        try:
            sock.accept()
            return True
        except BlockingIOError:
            return False

    def received(sock: socket.socket) -> bool:
        sock.setblocking(False)
        try:
            sock.recv(64)
            return True
        except BlockingIOError:
            return False

    after = snapshot(out)
    mounted = Path("/proc/self/mountinfo").read_text() != mounts
    if mounted:  # an escape mounted something: undo it before the temporary directory is removed
        ctypes.CDLL(None).umount2(str(out).encode(), 2)
    keys = {hostile.ipc_key(f"{config}-{c.name}"): c.name for c in cases}
    sysv = []
    for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        key, shmid = int(line.split()[0]), int(line.split()[1])
        if key in keys:  # an escape left a segment in the host's IPC namespace: remove it
            sysv.append(keys[key])
            ctypes.CDLL(None).shmctl(shmid, 0, None)  # IPC_RMID
    leftovers = sorted(str(p) for d in ("/tmp", "/dev/shm") for p in Path(d).glob(f"dvx-{config}-*"))
    for path in leftovers:
        os.unlink(path)
    report = {
        "layers": layers,
        "active": active,
        "landlock_abi": confine.landlock_abi(),
        "warnings": [str(w.message) for w in caught],
        "seconds": seconds,
        "results": {
            c.name: {
                "passed": r.passed,
                "status": r.status,
                "returncode": r.returncode,
                "output": r.output[-3000:],
                "seconds": r.seconds,
            }
            for c, r in zip(cases, results, strict=True)
        },
        "alive": left_alive,
        "heartbeats": sorted(name for name in beats_after if beats_after[name] != beats.get(name)),
        "changed": sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)),
        "leftovers": leftovers,
        "marker": marker.value.decode(errors="replace"),
        "usr1": len(usr1),
        "victim_alive": victim.poll() is None,
        "tcp": accepted(tcp),
        "udp": received(udp),
        "unix": accepted(unix),
        "abstract": accepted(abstract),
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)) == list(nofile),
        "nice": os.getpriority(os.PRIO_PROCESS, 0) == nice,
        "mounted": mounted,
        "sysv": sysv,
    }
    victim.kill()
    victim.wait()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
