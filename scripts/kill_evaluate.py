"""kill -9 of evaluate at random moments: is anything lost, duplicated or left unreadable?

    python scripts/kill_evaluate.py [--tree DIR] [--out DIR] [--kills 12] [--seed 0] [--slow-writes 0.3]

Runs a small toy sweep once uninterrupted (the reference), then again into another directory,
killing it with SIGKILL and restarting it (the same command resumes) until its sweep finishes: a
round. Rounds go on in new directories until `--kills` kills are done; the last one then finishes
undisturbed. Most kills come after a random delay (uniform up to the reference's time); the first
run of a round waits for a settings file half written (`settings/`: a file that does not parse yet),
and every third kill for a record line half written (`results.jsonl` not ending in a newline).
`--slow-writes S` widens those moments: in the child, every write of a run directory's file stops S
seconds halfway (after an fsync, so the half is on disk when the kill lands; 0: every kill after a
random delay). It then checks each round's run against the reference: the grid keys lost and added,
keys with more than one record line, every file parsing (records, examples, settings, configs), temp
files left, and `python -m diversed.report` on it. `--tree` is the source tree the children import
(default: this checkout), so one script measures two commits side by side; the slowing patch knows
both the atomic.py writer and the older one.

It measures; it is not a test (tests/ hold the checks that must stay true). Prints one line per kill
and a summary; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GRID = [
    "+experiment=toy",
    "task.n_examples=8",
    "task.max_new_tokens=8",
    "sweep.batch_size=4",
    "sweep.draft_lengths=[2,3]",
    "sweep.weights=[0.1,0.3,0.5,0.7,0.9]",
    "sweep.temperatures=[0.0,0.5,1.0]",
    "sweep.methods=[autoregressive,lossless,static]",
    "sweep.num_seeds=1",
    "timing.warmup=0",
    "timing.repeats=8",
    "runtime.progress=false",
]

# The child: evaluate's Hydra entry point, every file write of a run directory slowed halfway.
CHILD = r"""
import os, pathlib, sys, time
slow = float(os.environ.get("KILL_EVALUATE_SLOW") or 0)
def slowed(write):
    def halves(fd, data):
        write(fd, data[: len(data) // 2]); os.fsync(fd); time.sleep(slow); write(fd, data[len(data) // 2 :])
    return halves
if slow:
    try:  # this tree: one writer for every file (atomic.write_all)
        from diversed.files import atomic
        atomic.write_all = slowed(atomic.write_all)
    except ImportError:  # before atomic.py: the results' writer, and settings/configs' plain write_text
        from diversed.sweep import results
        results._write_all = slowed(results._write_all)
        def write_text(self, text, *a, **k):
            with open(self, "w") as f:
                f.write(text[: len(text) // 2]); f.flush(); os.fsync(f.fileno())
                time.sleep(slow); f.write(text[len(text) // 2 :])
            return len(text)
        pathlib.Path.write_text = write_text
sys.argv = ["evaluate", *sys.argv[1:]]
from diversed.evaluate import main
main()
"""


def child(tree: Path, run_dir: Path, slow: float, log) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "KILL_EVALUATE_SLOW": str(slow), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *GRID, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def half_written(run_dir: Path, moment: str) -> bool:
    """Whether `moment` (a settings file, a record line) is being written in `run_dir` right now."""
    if moment == "settings":
        for f in (run_dir / "settings").glob("*"):
            try:
                json.loads(f.read_bytes())
            except (OSError, ValueError):
                return True
        return False
    try:
        data = (run_dir / "results.jsonl").read_bytes()
    except OSError:
        return False
    return bool(data) and not data.endswith(b"\n")


def state(run_dir: Path) -> str:
    """What a kill left: record lines, a torn line, temp files, settings files that do not parse."""
    path = run_dir / "results.jsonl"
    data = path.read_bytes() if path.exists() else b""
    temps = [p for p in run_dir.rglob("*") if p.name.endswith(".tmp") or ".tmp-" in p.name]
    torn_settings = []
    for f in (run_dir / "settings").glob("*.json"):
        try:
            json.loads(f.read_bytes())
        except ValueError:
            torn_settings.append(f.name)
    lines, torn = data.count(b"\n"), bool(data) and not data.endswith(b"\n")
    return (
        f"{lines} records{', a torn last line' if torn else ''}, {len(temps)} temp files, "
        f"{len(torn_settings)} torn settings files"
    )


def check(run_dir: Path, reference: set[str], tree: Path, out: Path) -> dict:
    """A round's run against the reference: keys lost, added, duplicated; files that do not parse; the
    report written to `out`."""
    problems, keys = [], []
    for i, line in enumerate((run_dir / "results.jsonl").read_bytes().splitlines()):
        try:
            nan = lambda c, i=i: problems.append(f"results.jsonl line {i + 1}: {c}")  # noqa: E731
            keys.append(json.loads(line, parse_constant=nan)["key"])
        except (ValueError, KeyError, TypeError) as e:
            problems.append(f"results.jsonl line {i + 1}: {type(e).__name__}")
    for f in sorted((run_dir / "examples").glob("*.jsonl")):
        for i, line in enumerate(f.read_bytes().splitlines()):
            try:
                json.loads(line)
            except ValueError as e:
                problems.append(f"{f.name} line {i + 1}: {type(e).__name__}")
    for f in sorted((run_dir / "settings").glob("*")) + sorted((run_dir / "configs").glob("*")):
        try:
            assert (json.loads if f.suffix == ".json" else yaml.safe_load)(f.read_bytes())
        except Exception as e:  # noqa: BLE001 (a measurement: every failure counts)
            problems.append(f"{f.parent.name}/{f.name}: {type(e).__name__}")
    temps = [
        str(p.relative_to(run_dir))
        for p in run_dir.rglob("*")
        if p.name.endswith(".tmp") or ".tmp-" in p.name
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    report = subprocess.run(
        [sys.executable, "-m", "diversed.report", str(run_dir), "--out", str(out), "--formats", "png"],
        env=env,
        capture_output=True,
        text=True,
    )
    return {
        "lost": sorted(reference - set(keys)),
        "added": sorted(set(keys) - reference),
        "duplicated": sorted({k for k in keys if keys.count(k) > 1}),
        "unreadable": problems,
        "temp_files": temps,
        "report_rc": report.returncode,
        "report_error": report.stderr.strip().splitlines()[-1:] if report.returncode else [],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree the children import")
    parser.add_argument(
        "--out", type=Path, default=Path("kill_evaluate"), help="where the runs go (replaced)"
    )
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--slow-writes", type=float, default=0.3, help="seconds each file write stops halfway"
    )
    parser.add_argument(
        "--max-delay", type=float, default=None, help="latest random kill (default: the reference's time)"
    )
    args = parser.parse_args()
    rng, out = random.Random(args.seed), args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log = open(out / "children.log", "w")  # noqa: SIM115 (open for the whole measurement)

    t0 = time.perf_counter()
    ref = child(args.tree, out / "reference", args.slow_writes, log)
    if ref.wait() != 0:
        print(f"the reference run failed: see {out / 'children.log'}")
        return 1
    took = time.perf_counter() - t0
    reference = {
        json.loads(line)["key"] for line in (out / "reference" / "results.jsonl").read_bytes().splitlines()
    }
    print(f"reference: {len(reference)} grid points in {took:.1f} s")

    kills, rounds, failed = [], 0, False
    while len(kills) < args.kills:  # a round: one directory killed until its sweep finishes
        rounds += 1
        run_dir, runs = out / f"killed_{rounds}", 0
        while True:
            runs += 1
            proc = child(args.tree, run_dir, args.slow_writes, log)
            if len(kills) >= args.kills:  # enough: let it finish
                print(f"round {rounds}, run {runs}: let finish, exit status {proc.wait()}")
                break
            moment = (
                ("settings" if runs == 1 else "record" if len(kills) % 3 == 1 else "random")
                if args.slow_writes
                else "random"
            )
            start, clean = time.perf_counter(), False
            delay = rng.uniform(0.5, args.max_delay or took)
            while proc.poll() is None:
                elapsed = time.perf_counter() - start
                if moment == "random" and elapsed >= delay:
                    break
                if moment != "random":  # a write of this run's: what the last kill left is repaired first
                    busy = half_written(run_dir, moment)
                    if clean and busy:
                        break
                    clean = clean or not busy
                time.sleep(0.005)
            if proc.poll() is not None:
                print(
                    f"round {rounds}, run {runs}: finished before its kill ({moment}), "
                    f"exit status {proc.returncode}"
                )
                break
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills.append(moment)
            print(
                f"kill {len(kills)} (round {rounds}) at {time.perf_counter() - start:.2f} s "
                f"({moment}): {state(run_dir)}"
            )
        result = check(run_dir, reference, args.tree, out / f"report_{rounds}")
        bad = [k for k in ("lost", "added", "duplicated", "unreadable", "temp_files") if result[k]]
        failed |= bool(bad) or result["report_rc"] != 0
        print(json.dumps({"round": rounds, "runs": runs, **result}))
    print(
        json.dumps(
            {"kills": len(kills), "rounds": rounds, "at": {m: kills.count(m) for m in dict.fromkeys(kills)}}
        )
    )
    print("FAILED" if failed else "OK: nothing lost, duplicated or unreadable in any round; the report works")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
