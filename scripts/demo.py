"""`make demo`: the whole pipeline on the toy pair, on CPU: decode, train a head, sweep, plot.

1. build (or reuse) the toy pair and decode a few toy prompts speculatively, printing each
   completion with its score and the acceptance statistics (lossless, and static w = 0.5);
2. `python -m diversed.train +experiment=toy` trains a weight head;
3. `python -m diversed.evaluate +experiment=toy` sweeps autoregressive, lossless, the static
   ensemble over w and the new head over N and temperatures (resumable: re-running skips
   finished grid points);
4. `python -m diversed.plot` draws the Pareto fronts and the summary table.
Steps 2-4 run exactly the commands a user would type; everything goes under `--out`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from diversed import StaticEnsemble, speculative_generate
from diversed.tasks.toy import ToyTask
from diversed.toy import load_toy_pair


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
            pair.target, pair.draft, enc["input_ids"], enc["attention_mask"], verifier=verifier,
            num_draft_tokens=args.num_draft_tokens, max_new_tokens=task.max_new_tokens, do_sample=True,
            temperature=1.0, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
            generator=torch.Generator().manual_seed(args.seed),
        )  # fmt: skip
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


def run(title: str, *argv: str) -> None:
    print(f"\n=== {title}\n$ python {' '.join(argv)}", flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True)
    print(f"({time.perf_counter() - start:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="toy test prompts to decode in step 1")
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/demo", help="where the head, results and plots go")
    parser.add_argument("--n-examples", type=int, default=100, help="toy test prompts per grid point")
    args = parser.parse_args()
    out = Path(args.out)
    start = time.perf_counter()

    print("=== 1. the toy pair, and speculative decoding on a few prompts", flush=True)
    decode(args)
    run("2. train a weight head", "-m", "diversed.train", "+experiment=toy", "logger=csv",
        f"hydra.run.dir={out / 'train'}", "trainer.enable_progress_bar=false")  # fmt: skip
    run("3. sweep methods × w × N × temperature", "-m", "diversed.evaluate", "+experiment=toy",
        f"task.n_examples={args.n_examples}", f"sweep.heads=[{out / 'train' / 'head'}]", f"hydra.run.dir={out / 'sweep'}")  # fmt: skip
    run("4. Pareto fronts and the summary table", "-m", "diversed.plot", str(out / "sweep"), "--out", str(out / "plots"))

    print(f"\n=== done in {(time.perf_counter() - start) / 60:.1f} min")
    print(f"head:     {out / 'train' / 'head'}")
    print(f"results:  {out / 'sweep' / 'results.jsonl'}")
    print(f"figures:  {out / 'plots'}/pareto_*.png (and .pdf)")
    print(f"table:    {out / 'plots' / 'table.md'}")


if __name__ == "__main__":
    main()
