"""The GPU checklist's first two items (../shared/GPU.md) in one process, as one JSON file and a table.

1. Exactness on the device, in each dtype asked (float32 and bfloat16 by default), on the tests' tiny
   random Llama pair (tests/tiny_models.py) moved there:
   - lossless greedy against `target.generate`, N = 1, 3, 6, both bonus rules, a ragged batch;
   - static greedy with the target's bonus against transformers' `assistant_ensemble_weight`;
   - the first new token's law: static and dynamic verifiers, 6000 rows, chi-square against
     v = w·p + (1 − w)·q (and against p and q, to show the test has power).
   Where a greedy comparison differs, each differing row's first mismatch is reported with the gap
   there between the reference's token and ours (`mismatches`): a gap of a few bf16 steps is a tie
   that rounding breaks (a verification pass over N + 1 tokens runs other kernels than a one-token
   step), a wide one a bug.
2. The forward paths at the shapes of `--pair` (random-llama-8b-1b on a GPU): the direct path against
   transformers' own (`forward: hf`) on the check batch the engine itself compares them on
   (`decoding.forward._both_ways`), both against float32, and the autoregressive loop's tokens/s on
   each path at each `--batch-sizes`, greedy, `--max-new-tokens` per row.

What it does not do: time speculative decoding (that is `python -m diversed.bench`, scripts/gpu_bench.sh)
or train (scripts/paper_smoke.sh). It runs on CPU too (`--device cpu --pair toy`), which is how it was
checked before it went to a GPU.

    python scripts/gpu_checks.py --device cuda --out OUT_DIR [--pair random-llama-8b-1b]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run from a checkout, not installed; the tests' tiny pair

from test_engine import chi2_pvalue, first_position, random_head  # noqa: E402  (the tests' own checks)
from tiny_models import EOS, PAD, ragged_prompts, tiny_pair  # noqa: E402

from diversed import DynamicEnsemble, StaticEnsemble, speculative_generate  # noqa: E402
from diversed.decoding.autoregressive import autoregressive_generate  # noqa: E402
from diversed.decoding.forward import _both_ways, _check_batch, use_forward  # noqa: E402
from diversed.decoding.inputs import ordinary_ids  # noqa: E402
from diversed.decoding.verify import mix, total_variation  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mismatches(
    target, got: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor, draft=None, w=1.0
) -> list[dict]:
    """Each differing row's first mismatch and the gap there between the score of the reference's token and
    ours, from one unpadded `target(...)` forward (the weights and dtype that decoded, through
    transformers' path whichever path decoded) over the common prefix (`mask`: the prompts' attention
    mask; generated tokens are all kept, pad id or not), with the scores' largest magnitude. The score
    is the target's logit, or with `draft` the static ensemble's v = w·p + (1 − w)·q that greedy
    verification takes the argmax of (a mismatch at a target-bonus position is argmax p: its gap on v is
    then only indicative). A gap within the rounding of the scores in the models' dtype is a tie that
    the kernels of a one-token step and of a verification pass may break differently; a wide one is a
    bug."""
    out, n, P = [], min(got.shape[1], ref.shape[1]), mask.shape[1]
    for row in range(ref.shape[0]):
        diff = (got[row, :n] != ref[row, :n]).nonzero()
        if diff.numel() == 0 and got.shape[1] == ref.shape[1]:
            continue
        j = int(diff[0]) if diff.numel() else n  # or one ran on where the other had stopped
        keep = torch.cat([mask[row].bool(), torch.ones(j - P, dtype=torch.bool, device=mask.device)])
        with torch.no_grad():
            prefix = ref[row, :j][keep].view(1, -1)
            score = target(prefix).logits[0, -1].float()
            if draft is not None:
                score = mix(score.softmax(-1), draft(prefix).logits[0, -1].float().softmax(-1), w)
        entry = {"row": row, "position": j, "scale": float(score.abs().max())}
        if j < n:
            entry["gap"] = float(score[ref[row, j]] - score[got[row, j]])
        out.append(entry)
    return out


def exactness(device: torch.device, dtype: torch.dtype, path: str = "auto") -> list[dict]:
    """Item 1 on the tiny pair in `dtype` on `device`, the engine's forward path `path` for both models
    (`forward: auto` is hf on a GPU)."""
    target, draft = (m.to(device=device, dtype=dtype) for m in tiny_pair())
    for model in (target, draft):
        use_forward(model, path)
    results = []
    ids, mask = (t.to(device) for t in ragged_prompts())
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=24, pad_token_id=PAD, eos_token_id=EOS
    )
    for n in (1, 3, 6):
        for bonus in ("ensemble", "target"):
            out = speculative_generate(
                target, draft, ids, mask, num_draft_tokens=n, max_new_tokens=24, bonus_token=bonus
            )
            same = out.sequences.shape == ref.shape and torch.equal(out.sequences, ref)
            results.append(
                {
                    "check": f"lossless greedy = generate (N={n}, bonus={bonus})",
                    "pass": same,
                    "rows": ref.shape[0],
                    "mismatches": [] if same else mismatches(target, out.sequences, ref, mask),
                }
            )
    w, n = 0.4, 3
    draft.generation_config.num_assistant_tokens = n  # transformers' drafting as ours: N fixed
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    for seed in range(3):
        one, one_mask = (t.to(device) for t in ragged_prompts(lengths=(4 + 3 * seed,), seed=seed))
        try:
            hf = target.generate(
                one,
                assistant_model=draft,
                assistant_ensemble_weight=w,
                do_sample=False,
                max_new_tokens=25,
                pad_token_id=PAD,
                eos_token_id=EOS,
            )
        except Exception as e:  # an older transformers without assistant_ensemble_weight
            results.append(
                {"check": f"static greedy = assistant_ensemble_weight (seed {seed})", "error": repr(e)}
            )
            continue
        out = speculative_generate(
            target,
            draft,
            one,
            verifier=StaticEnsemble(w),
            num_draft_tokens=n,
            max_new_tokens=25,
            bonus_token="target",
        )
        same = out.sequences.shape == hf.shape and torch.equal(out.sequences, hf)
        results.append(
            {
                "check": f"static greedy w={w}, target bonus = assistant_ensemble_weight (seed {seed})",
                "pass": same,
                "mismatches": [] if same else mismatches(target, out.sequences, hf, one_mask, draft, w),
            }
        )
    prompt = torch.tensor([[5, 17, 33, 8, 61, 12]], device=device)
    head = random_head(target, draft).to(device)  # the tests' head: w varies with the context
    for kind in ("static", "dynamic"):
        p, q, w = first_position(target, draft, prompt, head if kind == "dynamic" else None)
        w = 0.6 if kind == "static" else w
        verifier = StaticEnsemble(w) if kind == "static" else DynamicEnsemble(head)
        n = 6000
        out = speculative_generate(
            target,
            draft,
            prompt.expand(n, -1),
            verifier=verifier,
            num_draft_tokens=3,
            max_new_tokens=2,
            do_sample=True,
            generator=torch.Generator(device).manual_seed(1),
            eos_token_id=[],
        )
        first = out.sequences[:, prompt.shape[1]]
        v = mix(p, q, w)
        expected = 1 - w * float(total_variation(p, q))
        pv, pp, pq = chi2_pvalue(first, v), chi2_pvalue(first, p), chi2_pvalue(first, q)
        rate = out.stats.acceptance_rate
        bound = 4 * (expected * (1 - expected) / n) ** 0.5
        results.append(
            {
                "check": f"first token ~ v ({kind}, w={w:.3f}, {n} rows)",
                "pass": pv > 1e-3 and pp < 1e-6 and pq < 1e-6 and abs(rate - expected) < bound,
                "p_value_v": pv,
                "p_value_p": pp,
                "p_value_q": pq,
                "acceptance": rate,
                "acceptance_expected": expected,
            }
        )
    return results


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def forward_paths(
    pair_name: str, device: torch.device, dtype: torch.dtype, batch_sizes, max_new: int
) -> dict:
    """Item 2: direct against hf at `pair_name`'s shapes, and the AR loop's tokens/s on each path."""
    from diversed.bench import BenchConfig, load_bench_pair

    t0 = time.perf_counter()
    pair = load_bench_pair(
        BenchConfig(pair=pair_name, device=str(device), dtype=str(dtype).removeprefix("torch."))
    )
    sync(device)
    report: dict = {"pair": pair_name, "dtype": str(dtype), "load_s": time.perf_counter() - t0, "models": {}}
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        entry: dict = {"parameters": sum(p.numel() for p in model.parameters())}
        try:
            batch = _check_batch(model, device)
            with torch.no_grad():
                _, pairs = _both_ways(model, *batch)
                (lg1, ld1), (hg1, hd1), (lg2, ld2), (hg2, hd2) = pairs
                entry["direct_vs_hf"] = {
                    "logits": max(rel(ld1, lg1), rel(ld2, lg2)),
                    "hidden": max(rel(hd1, hg1), rel(hd2, hg2)),
                }
                if dtype != torch.float32:  # both against float32: which path rounds more?
                    ref = copy.deepcopy(model).float()
                    _, exact = _both_ways(ref, *batch)
                    del ref
                    (lr1, _), (hr1, _), (lr2, _), (hr2, _) = exact
                    entry["hf_vs_fp32"] = {
                        "logits": max(rel(lg1, lr1), rel(lg2, lr2)),
                        "hidden": max(rel(hg1, hr1), rel(hg2, hr2)),
                    }
                    entry["direct_vs_fp32"] = {
                        "logits": max(rel(ld1, lr1), rel(ld2, lr2)),
                        "hidden": max(rel(hd1, hr1), rel(hd2, hr2)),
                    }
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
        except Exception as e:
            entry["agreement_error"] = repr(e)
        report["models"][role] = entry
    target = pair.target
    vocab = target.get_input_embeddings().weight.shape[0]
    timing, tokens = {}, {}
    for path in ("hf", "direct"):
        try:
            use_forward(target, path)
            for b in batch_sizes:
                ids = ordinary_ids(vocab, b * 32, device).view(b, 32)
                ids = (ids + torch.arange(b, device=device).view(b, 1) * 101) % vocab  # rows differ
                mask = torch.ones_like(ids)
                runs = []
                for rep in range(4):  # the first is warm-up
                    sync(device)
                    t = time.perf_counter()
                    out = autoregressive_generate(
                        target, ids, mask, max_new_tokens=max_new, eos_token_id=[], pad_token_id=0
                    )
                    sync(device)
                    if rep:
                        runs.append(time.perf_counter() - t)
                new = int(out.stats.new_tokens.sum())
                timing[f"{path} batch {b}"] = {
                    "tokens": new,
                    "median_s": statistics.median(runs),
                    "tok_s": new / statistics.median(runs),
                    "runs_s": runs,
                }
                tokens[(path, b)] = out.sequences.cpu()
        except Exception as e:
            timing[f"{path}"] = {"error": repr(e)}
    use_forward(target, "auto")
    for b in batch_sizes:
        if ("hf", b) in tokens and ("direct", b) in tokens:
            a, c = tokens[("hf", b)], tokens[("direct", b)]
            report.setdefault("greedy_rows_equal_hf_direct", {})[f"batch {b}"] = (
                f"{int((a == c).all(-1).sum())}/{b}"
            )
    report["ar_loop"] = timing
    if device.type == "cuda":
        report["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--pair", default="random-llama-8b-1b", help="item 2's pair (a bench --pair name)")
    ap.add_argument("--pair-dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--forward", nargs="+", default=["auto", "direct"], help="item 1's forward paths")
    ap.add_argument("--skip", nargs="*", default=[], choices=["exactness", "paths"])
    a = ap.parse_args()
    device = torch.device(a.device)
    a.out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
    }

    def save() -> None:
        (a.out / "gpu_checks.json").write_text(json.dumps(report, indent=1, default=str))

    for name, path in [(n, f) for n in a.dtypes for f in a.forward] if "exactness" not in a.skip else []:
        key, t = f"exactness {name} forward={path}", time.perf_counter()
        try:
            report[key] = exactness(device, getattr(torch, name), path)
        except Exception:
            report[key] = [{"error": traceback.format_exc()}]
        print(f"{key}: {time.perf_counter() - t:.1f} s", flush=True)
        for r in report[key]:
            verdict = "PASS" if r.get("pass") else "FAIL" if "pass" in r else "ERROR"
            rest = {k: v for k, v in r.items() if k not in ("check", "pass")}
            print(f"  {verdict}  {r.get('check', '')}  {rest}"[:400], flush=True)
        save()
    if "paths" not in a.skip:
        t = time.perf_counter()
        try:
            report["paths"] = forward_paths(
                a.pair, device, getattr(torch, a.pair_dtype), a.batch_sizes, a.max_new_tokens
            )
        except Exception:
            report["paths"] = {"error": traceback.format_exc()}
        print(f"paths: {time.perf_counter() - t:.1f} s", flush=True)
        print(json.dumps(report["paths"], indent=1, default=str)[:6000], flush=True)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
