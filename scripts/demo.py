"""`make demo`: build (or reuse) the toy pair and decode a few toy prompts speculatively.

Prints each completion with its score, then the acceptance statistics of lossless speculative
decoding and of a static ensemble (w = 0.5) at temperature 1.
"""

from __future__ import annotations

import argparse

import torch
from transformers.utils import logging as hf_logging

from diversed import StaticEnsemble, speculative_generate
from diversed.tasks.toy import ToyTask
from diversed.toy import load_toy_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="toy test prompts to decode")
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
