"""Time this checkout's engine against another checkout's, side by side in one process.

    git worktree add /tmp/old <commit>
    python scripts/ab_engine.py /tmp/old [--repeats 7] [--batch-sizes 1 8]

The other checkout's `diversed` package is copied to a temporary directory under the name
`diversed_old` (its imports rewritten), so both engines run in one process on the same toy pair,
the same prompts and the same seeds. Every setting (lossless / static w = 0.5 / dynamic with an
untrained head x greedy / T = 1 x batch sizes, N = 5, 32 toy prompts, up to 32 new tokens) runs
`--repeats` times with the two engines taking turns in alternating order; it prints the median
tokens/s of each, their ratio, and whether the outputs were identical. One torch thread.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def load_other(checkout: Path):
    """The other checkout's package, importable as `diversed_old`."""
    root = Path(tempfile.mkdtemp(prefix="ab-engine-"))
    shutil.copytree(checkout / "diversed", root / "diversed_old")
    for path in (root / "diversed_old").rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bfrom diversed(\.| import)", r"from diversed_old\1", text)
        text = re.sub(r"\bimport diversed\b", "import diversed_old", text)
        text = text.replace('"diversed.', '"diversed_old.')  # lazy export tables
        path.write_text(text)
    sys.path.insert(0, str(root))
    return importlib.import_module("diversed_old")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="another checkout of the project")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)

    import diversed
    from diversed.decoding.inputs import left_pad
    from diversed.models.toy import load_toy_pair
    from diversed.tasks import load_task

    old = load_other(args.other)
    pair = load_toy_pair()
    task = load_task("toy", n_examples=args.num_prompts)
    prompts = task.encode(pair.tokenizer, task.examples)
    tok = pair.tokenizer
    h_d, h_t = pair.draft.config.hidden_size, pair.target.config.hidden_size
    engines = {}
    for name, pkg in (("old", old), ("new", diversed)):
        head = pkg.WeightHead(h_d, h_t).eval()
        engines[name] = (
            pkg.speculative_generate,
            {
                "lossless": pkg.Lossless(),
                "static": pkg.StaticEnsemble(0.5),
                "dynamic": pkg.DynamicEnsemble(head),
            },
        )
    settings = [
        (v, t, b) for b in args.batch_sizes for t in (0.0, 1.0) for v in ("lossless", "static", "dynamic")
    ]
    times = {(s, e): [] for s in settings for e in engines}
    same = dict.fromkeys(settings, True)
    for rep in range(args.repeats + 1):  # the first repeat warms up
        for s in settings:
            verifier, temp, bs = s
            order = ("old", "new") if (rep + settings.index(s)) % 2 == 0 else ("new", "old")
            outs = {}
            for e in order:
                generate, verifiers = engines[e]
                seqs, start = [], time.perf_counter()
                for i in range(0, len(prompts), bs):
                    ids, mask = left_pad(prompts[i : i + bs], tok.pad_token_id, torch.device("cpu"))
                    out = generate(
                        pair.target,
                        pair.draft,
                        ids,
                        mask,
                        verifier=verifiers[verifier],
                        num_draft_tokens=5,
                        max_new_tokens=args.max_new_tokens,
                        do_sample=temp > 0,
                        temperature=temp or 1.0,
                        eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id,
                        generator=torch.Generator().manual_seed(rep * 1000 + i),
                    )
                    seqs.append((out.sequences, int(out.stats.new_tokens.sum())))
                elapsed = time.perf_counter() - start
                if rep:
                    times[(s, e)].append(sum(n for _, n in seqs) / elapsed)
                outs[e] = seqs
            same[s] &= all(torch.equal(a, b) for (a, _), (b, _) in zip(outs["old"], outs["new"], strict=True))
    print(f"{'setting':<34} {'old tok/s':>10} {'new tok/s':>10} {'new/old':>8}  outputs")
    for s in settings:
        o, n = (statistics.median(times[(s, e)]) for e in ("old", "new"))
        verifier, temp, bs = s
        label = f"{verifier}, {'greedy' if temp == 0 else 'T=1'}, batch {bs}"
        print(f"{label:<34} {o:>10.1f} {n:>10.1f} {n / o:>8.3f}  {'identical' if same[s] else 'DIFFER'}")


if __name__ == "__main__":
    main()
