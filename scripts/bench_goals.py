"""Check the performance goals of the speed issue (#7) on a bench run's records.

    python -m diversed.bench --output bench.json
    python scripts/bench_goals.py bench.json [--temperature 1.0]

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


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a `python -m diversed.bench --output` file")
    parser.add_argument("--temperature", type=float, default=1.0, help="the bench's --temperature")
    args = parser.parse_args(argv)
    text = goals(json.loads(Path(args.records).read_text()), args.temperature)
    print(text)
    return text


if __name__ == "__main__":
    main()
