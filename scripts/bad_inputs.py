"""The bad-input tally: wrong settings and files given to every entry point, and what each one did.

    python scripts/bad_inputs.py [--tree DIR] [--out tally.csv]

Each case runs one command as a user would (a subprocess, the toy pair, offline) and is sorted by
its outcome:
- `refused`: exit code != 0 before the pair's weights loaded, the message alone (no traceback);
- `refused+traceback`: refused before loading, but the message comes after a Python traceback;
- `late`: it failed only after the pair loaded (or with no message naming the problem);
- `warned`: it ran, and said what it changed (cases where running is right: a cut prompt);
- `silent`: it ran as if nothing were wrong.
"Before loading" means the entry point's "Loading pair" line was never printed. `--tree` is the
source tree to import (default: this checkout), so one script tallies two commits side by side.
The cases are the issue's (24) list and more; the setup (a tiny trained head, a half-written
checkpoint, a draft directory without a tokenizer) is made under a temporary directory.

It measures; it is not a test (tests/ hold the checks that must stay true).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the cheapest sweep: what a silently accepted case runs before it exits 0
CHEAP = [
    "+experiment=toy",
    "task.n_examples=2",
    "sweep.methods=[autoregressive]",
    "sweep.draft_lengths=[1]",
    "sweep.temperatures=[0]",
    "sweep.num_seeds=1",
    "timing.repeats=0",
    "timing.warmup=0",
]
CHEAP_TRAIN = [
    "+experiment=toy",
    "trainer.max_steps=2",
    "trainer.val_check_interval=1",
    "data.n_val=4",
    "data.n_train=8",
    "logger=csv",
]


def cases(tmp: Path) -> list[tuple[str, str, list[str], str]]:
    """(name, entry point, arguments, expected: 'refuse' | 'warn')."""
    ev, tr, di = "diversed.evaluate", "diversed.train", "diversed.distill"
    out = [f"hydra.run.dir={tmp}/runs/${{now:%H%M%S%f}}"]
    from diversed.models.toy import SHIPPED_DIR  # the default toy pair ships with the package

    local = ["pair=local", f"pair.target={SHIPPED_DIR / 'target'}"]
    return [
        # unknown keys (what Hydra's own hint suggests for a typo)
        ("unknown sweep key", ev, [*CHEAP, "+sweep.weight=[0.9]", *out], "refuse"),
        ("unknown engine key", ev, [*CHEAP, "+engine.topk=5", *out], "refuse"),
        ("unknown timing key", ev, [*CHEAP, "+timing.repeat=3", *out], "refuse"),
        ("unknown task key", ev, [*CHEAP, "+task.n_example=3", *out], "refuse"),
        ("unknown top-level key", ev, [*CHEAP, "+sed=3", *out], "refuse"),
        ("unknown model key (train)", tr, [*CHEAP_TRAIN, "+model.lrr=0.1", *out], "refuse"),
        ("unknown distill key", di, ["+experiment=distill_toy", "+distill.rolout=target", *out], "refuse"),
        # types and ranges
        ("N = 0", ev, [*CHEAP, "sweep.draft_lengths=[0]", *out], "refuse"),
        ("N = 2.7", ev, [*CHEAP, "sweep.draft_lengths=[2.7]", *out], "refuse"),
        ("w = 1.5", ev, [*CHEAP, "sweep.methods=[static]", "sweep.weights=[1.5]", *out], "refuse"),
        ("T < 0", ev, [*CHEAP, "sweep.temperatures=[-1]", *out], "refuse"),
        ("unknown method", ev, [*CHEAP, "sweep.methods=[nope]", *out], "refuse"),
        ("n_examples = 0", ev, [*CHEAP, "task.n_examples=0", *out], "refuse"),
        ("batch size 0", ev, [*CHEAP, "sweep.batch_size=0", *out], "refuse"),
        ("num_seeds 0", ev, [*CHEAP, "sweep.num_seeds=0", *out], "refuse"),
        ("repeats < 0", ev, [*CHEAP, "timing.repeats=-1", *out], "refuse"),
        ("top_p = 0", ev, [*CHEAP, "engine.top_p=0", *out], "refuse"),
        ("top_k < 0", ev, [*CHEAP, "engine.top_k=-1", *out], "refuse"),
        ("seed not a number", ev, [*CHEAP, "seed=abc", *out], "refuse"),
        ("dtype float8", ev, [*CHEAP, "pair.dtype=float8", *out], "refuse"),
        ("device cuda without GPU", ev, [*CHEAP, "pair.device=cuda", *out], "refuse"),
        ("forward path unknown", ev, [*CHEAP, "pair.forward=fast", *out], "refuse"),
        ("preset of another task", ev, ["+paper=xsum", "task=toy", *out], "refuse"),
        ("max_steps 0 (train)", tr, [*CHEAP_TRAIN, "trainer.max_steps=0", *out], "refuse"),
        ("lr 0 (train)", tr, [*CHEAP_TRAIN, "model.optimizer.lr=0", *out], "refuse"),
        (
            "group baseline, 1 sample",
            tr,
            [*CHEAP_TRAIN, "model.baseline=group", "model.num_samples=1", *out],
            "refuse",
        ),
        (
            "validation on the test split",
            tr,
            [*CHEAP_TRAIN, "task.split=test", "data.val_split=test", *out],
            "refuse",
        ),
        (
            "distill reuse w/o target rollout",
            di,
            ["+experiment=distill_toy", "distill.reuse=true", *out],
            "refuse",
        ),
        # files
        ("data file missing", ev, [*CHEAP, f"task.data_files={tmp}/none.jsonl", *out], "refuse"),
        ("data file not JSON", ev, [*CHEAP, f"task.data_files={tmp}/bad.jsonl", *out], "refuse"),
        (
            "GSM8K validation split offline",
            ev,
            [*CHEAP, "task=gsm8k", "task.split=validation", *out],
            "refuse",
        ),
        (
            "head directory missing",
            ev,
            [*CHEAP, "sweep.methods=[dynamic]", f"sweep.heads=[{tmp}/nohead]", *out],
            "refuse",
        ),
        (
            "head of another pair",
            ev,
            [*CHEAP, "sweep.methods=[dynamic]", f"sweep.heads=[{tmp}/foreign_head]", *out],
            "refuse",
        ),
        (
            "head file half written",
            ev,
            [*CHEAP, "sweep.methods=[dynamic]", f"sweep.heads=[{tmp}/half_head]", *out],
            "refuse",
        ),
        (
            "target directory missing",
            ev,
            [*CHEAP, "pair=local", f"pair.target={tmp}/none", f"pair.draft={tmp}/none", *out],
            "refuse",
        ),
        ("draft without tokenizer", ev, [*CHEAP, *local, f"pair.draft={tmp}/draft_no_tok", *out], "refuse"),
        ("ckpt_path a directory", tr, [*CHEAP_TRAIN, f"ckpt_path={tmp}", *out], "refuse"),
        ("ckpt_path missing", tr, [*CHEAP_TRAIN, f"ckpt_path={tmp}/none.ckpt", *out], "refuse"),
        ("ckpt_path 0 bytes", tr, [*CHEAP_TRAIN, f"ckpt_path={tmp}/empty.ckpt", *out], "refuse"),
        ("ckpt_path half written", tr, [*CHEAP_TRAIN, f"ckpt_path={tmp}/half.ckpt", *out], "refuse"),
        ("show: no run directory", "diversed.show", [f"{tmp}/none"], "refuse"),
        ("report: no run directory", "diversed.report", [f"{tmp}/none", "--out", f"{tmp}/report"], "refuse"),
        ("plot: no results", "diversed.plot", [f"{tmp}/none", "--out", f"{tmp}/plots"], "refuse"),
        ("bench -N 0", "diversed.bench", ["--pair", "toy-tiny", "-N", "0"], "refuse"),
        ("bench batch size 0", "diversed.bench", ["--pair", "toy-tiny", "--batch-sizes", "0"], "refuse"),
        # where running is right, but not in silence
        ("prompts cut to 3 tokens", ev, [*CHEAP, "task.max_prompt_tokens=3", *out], "warn"),
    ]


def setup(tmp: Path, tree: Path, env: dict[str, str]) -> None:
    """The files the cases point at: a bad data file, checkpoints, heads, a draft without tokenizer."""
    (tmp / "bad.jsonl").write_text("{not json\n")
    (tmp / "empty.ckpt").write_bytes(b"")
    run = [sys.executable, "-m", "diversed.train", *CHEAP_TRAIN, f"hydra.run.dir={tmp}/trained"]
    done = subprocess.run(run, cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        sys.exit(f"setup: training a head failed:\n{done.stderr[-3000:]}")
    ckpt = next((tmp / "trained").rglob("last.ckpt"))
    data = ckpt.read_bytes()
    (tmp / "half.ckpt").write_bytes(data[: len(data) // 2])
    head = next(p.parent for p in (tmp / "trained").rglob("head_config.json"))
    shutil.copytree(head, tmp / "half_head")
    for f in (tmp / "half_head").glob("*.safetensors"):
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    shutil.copytree(head, tmp / "foreign_head")
    import json

    config_file = tmp / "foreign_head" / "head_config.json"
    config = json.loads(config_file.read_text())
    config["pair"] = (
        "other"  # same hidden sizes, other models (as a head trained on another local pair records)
    )
    for role, member in (config.get("pair_identity") or {}).items():
        if isinstance(member, dict):
            config["pair_identity"][role] = {"path": f"/models/other-{role}", "weights": "0123456789abcdef"}
    config_file.write_text(json.dumps(config))
    from diversed.models.toy import SHIPPED_DIR  # the default toy pair ships with the package

    draft = SHIPPED_DIR / "draft"
    shutil.copytree(
        draft, tmp / "draft_no_tok", ignore=shutil.ignore_patterns("tokenizer*", "special_tokens*")
    )


def classify(rc: int, out: str, expected: str) -> str:
    loaded = "Loading pair" in out or "Loading the pair" in out
    traceback = "Traceback (most recent call last)" in out
    if rc == 0:
        warned = expected == "warn" and any(w in out.lower() for w in ("warning", "cut"))
        return "warned" if warned else "silent"
    if loaded:
        return "late"
    return "refused+traceback" if traceback else "refused"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(ROOT), help="source tree to import (default: this checkout)")
    parser.add_argument("--out", default=None, help="CSV of every case (default: print only)")
    parser.add_argument("--only", nargs="*", default=None, help="names of cases to run")
    parser.add_argument("--logs", default=None, help="a folder for each case's whole output")
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONWARNINGS": "ignore::FutureWarning",
    }
    rows = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        setup(tmp, tree, env)
        for case, module, argv, expected in cases(tmp):
            if args.only and case not in args.only:
                continue
            start = time.perf_counter()
            try:
                done = subprocess.run(
                    [sys.executable, "-m", module, *argv],
                    cwd=tmp,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                rc, out = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                rc, out = 124, "timed out"
            outcome = classify(rc, out, expected)
            if args.logs:
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                slug = "".join(c if c.isalnum() else "_" for c in case)
                Path(args.logs, f"{slug}.txt").write_text(
                    f"$ python -m {module} {' '.join(argv)}\nexit {rc}\n{out}"
                )
            last = next((line for line in reversed(out.strip().splitlines()) if line.strip()), "")
            rows.append(
                {
                    "case": case,
                    "entry": module.split(".")[-1],
                    "outcome": outcome,
                    "exit": rc,
                    "lines": len(out.strip().splitlines()),
                    "seconds": round(time.perf_counter() - start, 1),
                    "last_line": last[:160],
                }
            )
            print(f"{outcome:>18}  rc={rc:<3} {rows[-1]['lines']:>4} lines  {case}: {last[:110]}", flush=True)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print(f"\n{len(rows)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
