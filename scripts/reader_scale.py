"""Seconds and peak memory of show and report on large run directories (issue 43's numbers).

    python scripts/reader_scale.py [--tree DIR] [--work DIR] [--records 1000000] [--line-gb 2]

Builds, under `--work` (kept, reused when there), run directories of small records as evaluate writes
them (18 settings: autoregressive, lossless at N = 2, 4, 8, static w = 0.1 ... 0.9 at N = 2, 4; seeds
counting up; 200 points with per-example rows):

- `records`: `--records` of them at 2 temperatures (show);
- `report`: a tenth of them (report, PNG figures only);
- `temperatures`: 100,000 at 20,000 temperatures (show: picking the most common one);
- `long_line`: two records around one line of `--line-gb` GB (show; 0: skipped),

then runs each command in a fresh process and prints its seconds and peak RSS. `--tree` is the source
tree to import (default: this checkout), so one script measures two commits side by side.

It measures; it is not a test (tests/test_rundir.py holds the bounds that must stay true).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MEASURE = (  # the command in a fresh process: its own seconds and peak RSS on stderr's last line
    "import resource, runpy, sys, time; t = time.perf_counter(); sys.argv = sys.argv[1:]\n"
    "try:\n    runpy.run_module(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
)


def _settings() -> list[dict]:
    from diversed.sweep.results import run_record

    points = [("autoregressive", {})]
    points += [("lossless", {"num_draft_tokens": k}) for k in (2, 4, 8)]
    points += [("static", {"weight": w / 10, "num_draft_tokens": k}) for w in (1, 3, 5, 7, 9) for k in (2, 4)]
    return [
        run_record(
            pair="qwen",
            task="gsm8k",
            metric="accuracy",
            method=method,
            temperature=0.0,
            seed=0,
            n_examples=50,
            score=0.5,
            score_ci_low=0.4,
            score_ci_high=0.6,
            acceptance_rate=None if method == "autoregressive" else 0.7,
            tokens_per_s=30.0,
            wall_time_s=100.0,
            settings="0148ac20f180434f",
            settings_group="8cbbfa5c5c5f4cc3",
            split="test",
            **knobs,
        )
        for method, knobs in points
    ]


def build(run: Path, n: int, temperatures: int, examples: int = 200) -> Path:
    """`run` with `n` records at `temperatures` temperatures and per-example rows for `examples` points."""
    from diversed.files.rundir import json_line
    from diversed.sweep.results import examples_path, grid_key

    if (run / "results.jsonl").exists():
        return run
    settings = _settings()
    (run / "examples").mkdir(parents=True, exist_ok=True)
    rows = [
        {"example_id": str(j), "completion": f"The answer is {j}.\n#### {j}", "score": float(j % 2),
         "new_tokens": 12, "accepted_drafts": 8, "prompt": "Q: what is it?", "reference": str(j)}
        for j in range(5)
    ]  # fmt: skip
    with open(run / "results.jsonl.part", "wb") as f:
        for i in range(n):
            record = settings[i % len(settings)] | {
                "temperature": i % temperatures / temperatures,
                "seed": i // temperatures,
            }
            record["key"] = grid_key(**record)
            f.write(json_line(record))
            if i < examples:
                lines = b"".join(json_line({"key": record["key"], **r}) for r in rows)
                examples_path(run, record["key"]).write_bytes(lines)
    os.replace(run / "results.jsonl.part", run / "results.jsonl")
    return run


def long_line(run: Path, size: int) -> Path:
    """`run` with two records around one line of `size` bytes (a record with one huge string)."""
    if (run / "results.jsonl").exists():
        return run
    run.mkdir(parents=True, exist_ok=True)
    first, last = (json.dumps(r).encode() + b"\n" for r in _settings()[:2])
    block = b"a" * 2**20
    with open(run / "results.jsonl.part", "wb") as f:
        f.write(first + b'{"pair": "')
        for _ in range(size // len(block)):
            f.write(block)
        f.write(b'"}\n' + last)
    os.replace(run / "results.jsonl.part", run / "results.jsonl")
    return run


def measure(tree: Path, *args: str) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit status) of `python -m <args>` importing `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    seconds, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(rss_kb) / 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(ROOT), help="the source tree to import")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "diversed_reader_scale"))
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--line-gb", type=float, default=2.0)
    args = parser.parse_args()
    work, tree = Path(args.work), Path(args.tree).resolve()
    runs = {
        "show, records": ("diversed.show", build(work / "records", args.records, 2)),
        "report, a tenth": ("diversed.report", build(work / "report", args.records // 10, 2)),
        "show, 20,000 temperatures": ("diversed.show", build(work / "temperatures", 100_000, 20_000)),
    }
    if args.line_gb:
        runs["show, a long line"] = (
            "diversed.show",
            long_line(work / "long_line", int(args.line_gb * 2**30)),
        )
    print(f"tree {tree}")
    for name, (module, run) in runs.items():
        extra = ["--out", str(work / "report_out"), "--formats", "png"] if module.endswith("report") else []
        seconds, mb, status = measure(tree, module, str(run), *extra)
        print(f"{name:28s} {seconds:8.2f} s {mb:8.0f} MB peak RSS  exit {status}")


if __name__ == "__main__":
    main()
