"""Fingerprint the engine: outputs, statistics and host reads over a battery of settings.

    python scripts/engine_fingerprint.py OUT.json [--toy]
    PYTHONPATH=/path/to/other/checkout python scripts/engine_fingerprint.py OTHER.json [--toy]
    python scripts/engine_fingerprint.py --compare OUT.json OTHER.json

For a refactoring of the engine: run it on the commit before and after and compare. Each setting
(verifier x greedy/sampled x batch 1/ragged batch x bonus token x confidence threshold x schedule
x N x EOS x stop callback with and without triggers; then the first token from the target alone,
top-k/top-p truncation, and autoregressive decoding from p and from v) records the sequences, every
statistic but
the wall time, and how often the engine read a tensor on the host (`Tensor.cpu`, `.tolist`,
`.item`, `.numpy`, `bool()`, `int()`), per round. Only the public API is used, so any two
commits can be compared. The pair is the tiny random Llama pair of the tests (`tests/tiny_models.py`)
and, with `--toy`, the toy pair with the toy task's stop sequences (the one the package ships).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

READS = ("cpu", "tolist", "item", "numpy", "__bool__", "__int__")


@contextmanager
def count_reads():
    """Count the host reads of tensors made inside the block."""
    counts: Counter[str] = Counter()
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(name, fn):
        def counted(self, *a, **k):
            counts[name] += 1
            return fn(self, *a, **k)

        return counted

    for name, fn in saved.items():
        setattr(torch.Tensor, name, wrap(name, fn))
    try:
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


def first_bigram_stop(a: int, b: int, triggers=None):
    def stop(tokens, new):
        return next((i + 2 for i in range(len(tokens) - 1) if tokens[i : i + 2] == [a, b]), None)

    if triggers is not None:
        stop.triggers = triggers
    return stop


STATS = (
    "proposed",
    "accepted",
    "rounds",
    "new_tokens",
    "accepted_hist",
    "w_sum",
    "w_count",
    "verified",
    "tv_sum",
    "token_w",
)


def values(t):
    """A statistic's tensor as JSON: floats rounded, NaN as None (NaN != NaN would differ from itself)."""
    if t is None or not t.is_floating_point():
        return None if t is None else t.tolist()
    return [None if x != x else round(x, 5) for x in t.flatten().tolist()]


def record(out, counts) -> dict:
    s = out.stats
    fields = {name: values(getattr(s, name, None)) for name in STATS}
    return {
        "sequences": out.sequences.tolist(),
        **fields,
        "target_calls": s.target_calls,
        "draft_calls": s.draft_calls,
        "num_draft_tokens": list(s.num_draft_tokens),
        "host_reads": dict(sorted(counts.items())),
    }


def tiny_battery() -> dict[str, dict]:
    from tiny_models import EOS, VOCAB, ragged_prompts, tiny_pair

    from diversed import DynamicEnsemble, Lossless, StaticEnsemble, WeightHead, speculative_generate

    target, draft = tiny_pair()
    torch.manual_seed(0)
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    with torch.no_grad():
        head.net[-1].weight.normal_(0, 0.05)
    head.eval()
    verifiers = {
        "lossless": Lossless(),
        "static0.4": StaticEnsemble(0.4),
        "static0": StaticEnsemble(0.0),
        "dynamic": DynamicEnsemble(head),
    }
    ids, mask = ragged_prompts()
    batches = {
        "b1": (ids[2:3, -3:], mask[2:3, -3:]),
        "b4": (ids, mask),
        "b8": (ids.repeat(2, 1), mask.repeat(2, 1)),
    }
    stops = {
        "none": None,
        "bigram": first_bigram_stop(17, 40),
        "bigram+triggers": first_bigram_stop(17, 40, torch.arange(VOCAB - 2) == 40),
    }
    out = {}
    grid = itertools.product(
        verifiers,
        (0.0, 1.0, 0.7),
        batches,
        ("ensemble", "target"),
        (None, 0.3),
        ("constant", "heuristic"),
        (1, 4),
        ("eos", "noeos"),
        stops,
    )
    for v, temp, b, bonus, thr, sched, n, eos, stop in grid:
        # keep the battery to a few minutes: the full product on a subset of axes
        if thr is not None and sched == "heuristic":
            continue
        if stop != "none" and (b == "b1" or thr is not None or sched == "heuristic"):
            continue
        if b == "b8" and (thr is not None or sched == "heuristic" or eos == "noeos"):
            continue
        name = f"{v}|T={temp}|{b}|bonus={bonus}|thr={thr}|{sched}|N={n}|{eos}|stop={stop}"
        gen = torch.Generator().manual_seed(7)
        kwargs = dict(
            verifier=verifiers[v],
            num_draft_tokens=n,
            max_new_tokens=21,
            do_sample=temp > 0,
            temperature=temp or 1.0,
            bonus_token=bonus,
            draft_confidence_threshold=thr,
            num_draft_tokens_schedule=sched,
            eos_token_id=EOS if eos == "eos" else [],
            generator=gen,
            stop=stops[stop],
        )
        with count_reads() as counts:
            result = speculative_generate(target, draft, *batches[b], **kwargs)
        out[name] = record(result, counts)
    out.update(other_paths(target, draft, verifiers, batches, stops, EOS))
    return out


def other_paths(target, draft, verifiers, batches, stops, eos) -> dict[str, dict]:
    """The engine's first token from the target alone and truncated sampling, and autoregressive
    decoding (the target alone, and from v with each ensemble), on the ragged batch."""
    from diversed import autoregressive_generate, speculative_generate

    out = {}
    grid = itertools.product(verifiers, (0.0, 1.0), ("b1", "b4"), ("none", "bigram"), ("ensemble", "target"))
    for v, temp, b, stop, bonus in grid:
        common = dict(
            max_new_tokens=21, do_sample=temp > 0, temperature=temp or 1.0, eos_token_id=eos, stop=stops[stop]
        )
        spec = dict(common, verifier=verifiers[v], num_draft_tokens=3)
        runs = {
            f"first=target|{v}|T={temp}|{b}|bonus={bonus}|stop={stop}": (
                speculative_generate,
                (target, draft),
                dict(spec, bonus_token=bonus, first_token="target"),
            )
        }
        if temp > 0 and bonus == "ensemble":
            runs[f"topk=5,topp=0.9|{v}|{b}|stop={stop}"] = (
                speculative_generate,
                (target, draft),
                dict(spec, top_k=5, top_p=0.9),
            )
        if bonus == "ensemble" and v == "lossless":
            runs[f"autoregressive|T={temp}|{b}|stop={stop}"] = (autoregressive_generate, (target,), common)
        if bonus == "ensemble" and v != "lossless":
            runs[f"autoregressive-v|{v}|T={temp}|{b}|stop={stop}"] = (
                autoregressive_generate,
                (target,),
                dict(common, draft=draft, verifier=verifiers[v]),
            )
        for name, (generate, models, kwargs) in runs.items():
            with count_reads() as counts:
                result = generate(*models, *batches[b], generator=torch.Generator().manual_seed(5), **kwargs)
            out[name] = record(result, counts)
    return out


def toy_battery() -> dict[str, dict]:
    from diversed import DynamicEnsemble, Lossless, StaticEnsemble, WeightHead, speculative_generate
    from diversed.models.toy import load_toy_pair
    from diversed.tasks import load_task

    pair = load_toy_pair()
    tok = pair.tokenizer
    task = load_task("toy", n_examples=16)
    enc = tok([task.prompt(e) for e in task], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    head = WeightHead(pair.draft.config.hidden_size, pair.target.config.hidden_size)
    with torch.no_grad():
        head.net[-1].weight.normal_(0, 0.05)
    verifiers = {
        "lossless": Lossless(),
        "static0.5": StaticEnsemble(0.5),
        "dynamic": DynamicEnsemble(head.eval()),
    }
    out = {}
    for v, temp, bs, stop in itertools.product(verifiers, (0.0, 1.0), (1, 8), (False, True)):
        gen = torch.Generator().manual_seed(3)
        results = []
        with count_reads() as counts:
            for i in range(0, 16, bs):
                ids, mask = enc["input_ids"][i : i + bs], enc["attention_mask"][i : i + bs]
                if bs == 1:
                    ids, mask = ids[:, mask[0].bool()], None
                results.append(
                    speculative_generate(
                        pair.target,
                        pair.draft,
                        ids,
                        mask,
                        verifier=verifiers[v],
                        num_draft_tokens=5,
                        max_new_tokens=task.max_new_tokens,
                        do_sample=temp > 0,
                        temperature=temp or 1.0,
                        eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id,
                        generator=gen,
                        stop=task.stopper(tok) if stop else None,
                    )
                )
        rec = [record(r, Counter()) for r in results]
        out[f"toy|{v}|T={temp}|b{bs}|stop={stop}"] = {
            "batches": rec,
            "host_reads": dict(sorted(counts.items())),
        }
    return out


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def compare(a_path: str, b_path: str) -> int:
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"only in one: {name}")
            bad += 1
            continue
        for field in sorted(set(a[name]) | set(b[name])):
            if a[name].get(field) != b[name].get(field):
                print(
                    f"DIFF {name}: {field}: {str(a[name].get(field))[:200]} "
                    f"!= {str(b[name].get(field))[:200]}"
                )
                bad += 1
    print(f"{len(set(a) & set(b))} settings compared, {bad} differences")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--toy", action="store_true", help="also the toy pair with stop sequences")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = parser.parse_args()
    if args.compare:
        sys.exit(1 if compare(*args.compare) else 0)
    import diversed

    torch.set_num_threads(1)
    print(f"diversed from {Path(diversed.__file__).parent}", file=sys.stderr)
    result = tiny_battery()
    if args.toy:
        result.update(toy_battery())
    Path(args.out).write_text(json.dumps(result, sort_keys=True) + "\n")
    print(f"{len(result)} settings -> {args.out} ({digest(result)})")


if __name__ == "__main__":
    main()
