"""`make demo`: the paper's whole pipeline on the toy pair, on CPU, ending in its report.

1. build (or reuse) the toy pair and decode a few toy prompts speculatively, printing each
   completion with its score and the acceptance statistics (lossless, and static w = 0.5);
2. `python -m diversed.train` trains one weight head per toy task (addition, counting);
3. `python -m diversed.distill` fine-tunes the draft per task (the "SD with a fine-tuned draft" row);
4. `python -m diversed.evaluate` sweeps the knob families on each task's VALIDATION split (where the
   report chooses their settings), then every method on the test split: autoregressive, lossless,
   the fine-tuned draft, the static ensemble, lossy SD, cascades, typical acceptance, and BOTH heads
   (each on its own task and on the other: the transfer table), with per-token w and batch-1
   latency, every point once per seed (`--seeds`; resumable: re-running skips finished points);
5. `python -m diversed.report` writes Tables 1-3 (intervals over examples and seeds, DIVERSED paired
   against each baseline) and the figures; `--docs` copies the README's figures and writes the
   README's demo results between its markers from the report's claims.md, so no number there is typed.
Steps 2-5 run exactly the commands a user would type; everything goes under `--out`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from diversed import StaticEnsemble, speculative_generate
from diversed.models.toy import load_toy_pair
from diversed.tasks.toy import ToyTask

TASKS = ("toy", "toy_count")


def decode(args: argparse.Namespace) -> None:
    """Step 1: a few toy prompts through the engine, with their stats."""
    hf_logging.disable_progress_bar()

    pair = load_toy_pair(seed=args.seed)
    tok = pair.tokenizer
    task = ToyTask.load(split="test", n_examples=args.n, seed=args.seed)
    enc = tok([task.prompt(e) for e in task], return_tensors="pt", padding=True)
    print(
        f"pair {pair.name}: target {pair.target_name}\n{' ' * (6 + len(pair.name))}draft  {pair.draft_name}"
    )

    for label, verifier in (("lossless", None), ("static w=0.5", StaticEnsemble(0.5))):
        out = speculative_generate(
            pair.target,
            pair.draft,
            enc["input_ids"],
            enc["attention_mask"],
            verifier=verifier,
            num_draft_tokens=args.num_draft_tokens,
            max_new_tokens=task.max_new_tokens,
            do_sample=True,
            temperature=1.0,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            generator=torch.Generator().manual_seed(args.seed),
        )
        texts = tok.batch_decode(out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        scores = [task.score(e, t) for e, t in zip(task, texts, strict=True)]
        print(f"\n{label} (T = 1, N = {args.num_draft_tokens})")
        for e, t, s in zip(task, texts, scores, strict=True):
            print(f"  {task.prompt(e)}{t!s:<28} {'ok' if s else 'wrong'}")
        st = out.stats
        print(
            f"  exact match {sum(scores) / len(scores):.2f}  acceptance rate {st.acceptance_rate:.2f}  "
            f"mean accepted length {st.mean_accepted_length:.2f}  tokens per target call "
            f"{st.tokens_per_target_call:.2f}  histogram {st.accepted_hist.sum(0).tolist()}"
        )


def run(title: str, *argv: str) -> float:
    print(f"\n=== {title}\n$ python {' '.join(argv)}", flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True)
    took = time.perf_counter() - start
    print(f"({took:.0f} s)", flush=True)
    return took


# The figures the README shows, copied by --docs (names as the report writes them).
DOCS = (
    "acceptance_vs_w_toy_toy_T1.png",
    "quality_vs_time_toy_T1.png",
    "time_vs_acceptance_toy_count_T1.png",
    "pareto_toy_toy_T1.png",
)


# The demo grid, the same on both splits (the validation sweep has only the knob families and no timing).
GRID = (
    "sweep.draft_lengths=[3,5]",
    "sweep.temperatures=[1.0,0.1]",
    "sweep.weights=[0.0,0.2,0.4,0.6,0.8,1.0]",
    "sweep.lenience=[0.3,0.6,0.9]",
    "sweep.cascade_rules=[chow,opt]",
    "sweep.cascade_alphas=[0.1,0.3]",
    "sweep.typical_epsilons=[0.05,0.3]",
)

BEGIN, END = (
    "<!-- demo results: written by scripts/demo.py --docs from the report; do not edit -->",
    "<!-- end of demo results -->",
)


def fill_readme(readme: Path, text: str, markers: tuple[str, str] = (BEGIN, END)) -> None:
    """Replace what lies between the README's demo `markers` with `text` (the report's claims)."""
    begin, end = markers
    body = readme.read_text()
    if begin not in body or end not in body:
        raise SystemExit(
            f"{readme} has no demo markers ({begin} ... {end}): add them where the demo's results go"
        )
    head, rest = body.split(begin, 1)
    readme.write_text(f"{head}{begin}\n{text.strip()}\n{end}{rest.split(end, 1)[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="toy test prompts to decode in step 1")
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default="outputs/demo", help="where heads, drafts, results and the report go"
    )
    parser.add_argument("--n-examples", type=int, default=100, help="toy test prompts per grid point")
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds per grid point (intervals over examples and seeds)"
    )
    parser.add_argument(
        "--docs", default=None, help="copy the README's figures here (e.g. docs) and fill --readme"
    )
    parser.add_argument("--readme", default="README.md", help="the README whose demo results --docs rewrites")
    args = parser.parse_args()
    out = Path(args.out)
    start, took = time.perf_counter(), {}

    print("=== 1. the toy pair, and speculative decoding on a few prompts", flush=True)
    decode(args)
    heads = [out / f"train_{t}" / "head" for t in TASKS]
    for task in TASKS:
        took[f"train {task}"] = run(
            f"2. train a weight head on {task}",
            "-m",
            "diversed.train",
            "+experiment=toy",
            f"task={task}",
            "logger=csv",
            f"hydra.run.dir={out / f'train_{task}'}",
            "trainer.enable_progress_bar=false",
        )
    for task in TASKS:
        took[f"distill {task}"] = run(
            f"3. fine-tune the draft on {task}",
            "-m",
            "diversed.distill",
            "+experiment=distill_toy",
            f"task={task}",
            "logger=csv",
            f"hydra.run.dir={out / f'distill_{task}'}",
            "trainer.enable_progress_bar=false",
        )
    seeds = f"sweep.num_seeds={args.seeds}"
    families = "sweep.methods=[autoregressive,static,lossy,cascade,typical]"
    for task in TASKS:
        took[f"validation {task}"] = run(
            f"4a. sweep the knob families on {task}'s validation split (the report chooses settings there)",
            "-m",
            "diversed.evaluate",
            "+experiment=toy",
            f"task={task}",
            "task.split=validation",
            f"task.n_examples={args.n_examples}",
            f"hydra.run.dir={out / f'validation_{task}'}",
            families,
            seeds,
            *GRID,
            "timing.warmup=0",
            "timing.repeats=0",
            "runtime.progress=false",
        )
    for task in TASKS:
        took[f"sweep {task}"] = run(
            f"4. sweep every method on {task}",
            "-m",
            "diversed.evaluate",
            "+experiment=toy",
            f"task={task}",
            f"task.n_examples={args.n_examples}",
            f"hydra.run.dir={out / f'sweep_{task}'}",
            "sweep.methods=[autoregressive,lossless,finetuned_draft,static,dynamic,lossy,cascade,typical]",
            seeds,
            *GRID,
            f"sweep.heads=[{','.join(map(str, heads))}]",
            f"sweep.draft_models=[{out / f'distill_{task}' / 'draft'}]",
            "sweep.token_w=true",
            "timing.repeats=5",
            "timing.latency=true",
            "timing.latency_repeats=3",
            "timing.latency_examples=20",
            "runtime.progress=false",
        )
    took["report"] = run(
        "5. the report: Tables 1-3 and figures",
        "-m",
        "diversed.report",
        *(str(out / f"{kind}_{t}") for kind in ("validation", "sweep") for t in TASKS),
        "--out",
        str(out / "report"),
    )
    if args.docs:
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        for name in DOCS:
            shutil.copy(out / "report" / "figures" / name, Path(args.docs) / name)
        learned = sorted((out / "report" / "figures").glob("w_by_token_class_toy_toy_T1_N5_head-toy-*.png"))
        if learned:
            shutil.copy(learned[0], Path(args.docs) / "w_by_token_class_toy_T1.png")
        minutes = (time.perf_counter() - start) / 60
        timing = (
            f"This run: {args.seeds} seeds × {args.n_examples} prompts per task and split, "
            f"{minutes:.1f} min on {os.cpu_count()} CPU cores for steps 1-5 "
            "(with the toy pair's build where it was not cached): "
            + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
            + "."
        )
        claims = (out / "report" / "claims.md").read_text()
        (Path(args.docs) / "demo_claims.md").write_text(claims + "\n" + timing + "\n")
        fill_readme(Path(args.readme), claims + "\n" + timing + "\n")

    print(
        f"\n=== done in {(time.perf_counter() - start) / 60:.1f} min: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
    )
    print(f"report:   {out / 'report' / 'README.md'} (tables table_T*.md, transfer_T*.md; figures/)")


if __name__ == "__main__":
    main()
