"""Check the performance goals of the speed issue (#7), or the CPU floors of the real-pair speed
issue (#42, `--floors cpu`), on a bench run's records.

    python -m diversed.bench --output bench.json
    python scripts/bench_goals.py bench.json [--temperature 1.0]
    python scripts/bench_goals.py qwen.json --floors cpu

The CPU floors, per generated token at batch 1, end to end and decode only (prompt passes left out):
lossless speculative decoding at least 1.0x autoregressive decoding with the same target, forward
path and temperature; the static ensemble (or DIVERSED) at least 1.5x; every speculative setting at
least 0.8 of the bound (1 - a^(N+1)) / ((1 - a)(N c + 1)), a and c measured in the same run; a
verification pass at most 1.5 one-token steps (v/d). A floor "holds" where the 95 % interval's lower
end clears it, is "point" where only the estimate does, else "MISS".

The goals are the issue's, not the product's (so they live here, not in `diversed.bench`): our
engine at batch 1 at least 2x transformers' assisted generation; batch 8 at least 3x batch 1; the
speedup at least 0.8 of the theoretical one; training rollouts at least 2x sampling from v.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def goals(records: list[dict[str, Any]], temperature: float) -> str:
    """The goals, each as measured against its target."""
    rows = []
    ours = [r for r in records if r["engine"] == "diversed"]
    for r in ours:
        if r.get("ratio_to_transformers") is not None:
            rows.append(("tok/s vs transformers", r["label"], r["ratio_to_transformers"], 2.0, ""))
    for r in ours:
        if r.get("ratio_to_batch_1") is not None:
            rows.append(("tok/s vs our batch 1", r["label"], r["ratio_to_batch_1"], 3.0, ""))
    for r in ours:
        if r.get("speedup_fraction_of_theory") is not None:
            note = f"speedup {r['speedup']:.2f} of {r['theoretical_speedup']:.2f}"
            if r.get("verify_decode_time_ratio") is not None:  # absent where the target made no decoding step
                note += (
                    f"; a verify forward costs {r['verify_decode_time_ratio']:.2f} one-token decoding steps: "
                    f"{r['speedup_fraction_at_verify_cost']:.2f} of the bound at that cost"
                )
            rows.append(("speedup / theory", r["label"], r["speedup_fraction_of_theory"], 0.8, note))
    for r in ours:
        if r.get("speedup_over_v_sampling") is not None and r["temperature"] == temperature:
            note = f"bound {r['theoretical_speedup_over_v_sampling']:.2f}"
            rows.append(("rollouts vs sampling v", r["label"], r["speedup_over_v_sampling"], 2.0, note))
    return "\n".join(
        f"{'ok  ' if value >= goal else 'MISS'} {what:<23} {label:<56} {value:5.2f} (goal {goal:g}) {note}"
        for what, label, value, goal, note in rows
    )


FLOORS = {"lossless": 1.0, "static": 1.5, "dynamic": 1.5}  # speedup over autoregressive decoding
BOUND_FLOOR, VERIFY_CEILING = 0.8, 1.5


def cpu_floors(records: list[dict[str, Any]]) -> str:
    """The real-pair speed issue's floors on our engine's batch-1 records (module docstring)."""
    rows = []
    for r in records:
        if r["engine"] != "diversed" or r["batch_size"] != 1 or r.get("speedup") is None:
            continue
        if r.get("bonus_token") == "target" or r["verifier"] not in FLOORS:
            continue
        floor = FLOORS[r["verifier"]]
        for what, key in (("speedup, end to end", "speedup"), ("speedup, decode only", "decode_speedup")):
            low = r.get(f"{key}_low")
            verdict = "holds" if low is not None and low >= floor else "point" if r[key] >= floor else "MISS"
            interval = "" if low is None else f"[{low:.2f}, {r[f'{key}_high']:.2f}]"
            rows.append((verdict, what, r["label"], f"{r[key]:.2f} {interval}", f">= {floor:g}"))
        theory = r["theoretical_speedup"]
        for what, key in (
            ("of the bound, end to end", "speedup"),
            ("of the bound, decode", "decode_speedup"),
        ):
            share = r[key] / theory
            rows.append(
                ("holds" if share >= BOUND_FLOOR else "MISS", what, r["label"], f"{share:.2f}", ">= 0.8")
            )
        v = r.get("verify_decode_time_ratio")
        if v is not None:
            rows.append(("holds" if v <= VERIFY_CEILING else "MISS", "v/d", r["label"], f"{v:.2f}", "<= 1.5"))
    return "\n".join(
        f"{verdict:<5} {what:<26} {label:<56} {value:<20} {goal}"
        for verdict, what, label, value, goal in rows
    )


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a `python -m diversed.bench --output` file")
    parser.add_argument("--temperature", type=float, default=1.0, help="the bench's --temperature")
    parser.add_argument("--floors", choices=("cpu",), default=None, help="cpu: the real-pair CPU floors")
    args = parser.parse_args(argv)
    records = json.loads(Path(args.records).read_text())
    text = cpu_floors(records) if args.floors == "cpu" else goals(records, args.temperature)
    print(text)
    return text


if __name__ == "__main__":
    main()
