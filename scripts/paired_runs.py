"""One method's quality in two run directories, paired by example: A − B with its interval.

    python scripts/paired_runs.py RUN_A RUN_B [--method autoregressive] [--temperature 0.1]

Where the report (`python -m diversed.report`) pairs settings within one pair and task, this pairs
the same method, task and temperature across two runs that differ in something the report keeps apart:
another target (an int8 one, `pair.target_quantize=int8`, against the float one), another dtype, another
machine. Each side's examples are averaged over its seeds (`compare.per_example`); the difference is
taken on the examples both scored (`compare.paired`: BCa bootstrap interval, paired randomisation
test's p), and each side's mean comes with its own interval (`compare.cell_intervals`). It prints one
line per (task, temperature, N) cell found in both runs, and the settings that differ between them.

It reads records only; nothing is decoded or rescored. A cell holding several settings on one side
(other knobs, another max_new_tokens...) is refused rather than averaged, as is a cell whose two sides
share no example; cells are matched on their split too (test rows are never paired with validation
rows). A run directory without records, or a refusal, exits with status 2 and says why on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from diversed.analysis.compare import cell_intervals, paired, per_example, setting_fields
from diversed.errors import UserError
from diversed.sweep.results import load_runs

CELL = ("task", "split", "temperature", "num_draft_tokens")


def _cells(df: pd.DataFrame, method: str) -> dict[tuple, pd.DataFrame]:
    rows = df[df["method"] == method]
    return {
        tuple(None if pd.isna(v) else v for v in (key if isinstance(key, tuple) else (key,))): group
        for key, group in rows.groupby(list(CELL), dropna=False)
    }


def _settings(records: pd.DataFrame) -> dict | None:
    """The settings a cell's first record was decoded with (`settings/<digest>.json` of its run dir),
    without its seed; None where the file is not there (records from before it was kept)."""
    row = records.iloc[0]
    path = Path(row["run_dir"]) / "settings" / f"{row.get('settings')}.json"
    if not path.is_file():
        return None
    settings = json.loads(path.read_text())
    settings.pop("seed", None)
    return settings


def _several(records: pd.DataFrame) -> int:
    """How many settings (every seed of one counted once) a cell's records hold."""
    fields = [f for f in setting_fields() if f in records]
    return records.groupby(fields, dropna=False).ngroups if fields else 1


def _differing(a: dict, b: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two settings trees."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differing(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}: {x!r} | {y!r}")
    return out


def _mean(cell: dict[str, float]) -> str:
    """A side's mean score ×100 with its 95 % interval."""
    return f"{100 * cell['score']:.2f} [{100 * cell['score_ci_low']:.2f}, {100 * cell['score_ci_high']:.2f}]"


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/paired_runs.py", description=__doc__.splitlines()[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument(
        "--method", default="autoregressive", help="the method compared (default: %(default)s)"
    )
    parser.add_argument("--temperature", type=float, default=None, help="only this temperature")
    args = parser.parse_args(argv)
    try:
        a, b = (_cells(load_runs(run), args.method) for run in (args.run_a, args.run_b))
    except UserError as e:
        return _refuse(str(e))
    shared = [c for c in a if c in b and (args.temperature is None or math.isclose(c[2], args.temperature))]
    if not shared:
        return _refuse(
            f"no {args.method} cell (task, split, T, N) in both runs: A has {sorted(a)}, B has {sorted(b)}"
        )
    for cell in shared:
        ra, rb = a[cell], b[cell]
        for side, records in (("A", ra), ("B", rb)):
            if (count := _several(records)) > 1:
                return _refuse(
                    f"{cell}: run {side} holds {count} settings here; give runs of one setting a cell"
                )
        ea, eb = per_example(ra), per_example(rb)
        if ea is None or eb is None:
            return _refuse(f"{cell}: a side lacks its per-example rows; nothing to pair")
        if not len(ea.index.intersection(eb.index)):
            return _refuse(f"{cell}: the two runs share no example; nothing to pair")
        ia, ib = cell_intervals(ea), cell_intervals(eb)
        d = paired(ea, eb, p_value=True)
        task, split, t, n = cell
        at = "" if n is None else f", N = {int(n)}"
        print(
            f"{task} ({split}), T = {t:g}{at}, {args.method}: A {_mean(ia)}, B {_mean(ib)}; "
            f"A − B {100 * d['diff']:+.2f} [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}] over {d['n']} "
            f"examples (paired randomisation p = {d['p']:.3g}); A {len(ea)} examples x "
            f"{int(ea['runs'].max())} seed(s), B {len(eb)} x {int(eb['runs'].max())}"
        )
        sa, sb = _settings(ra), _settings(rb)
        if sa is None or sb is None:
            print("  (a side's settings file is missing: what differs cannot be said)")
        for line in _differing(sa or {}, sb or {}) if sa is not None and sb is not None else []:
            print(f"  differs: {line}")
    return 0


def _refuse(why: str) -> int:
    print(f"paired_runs: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(run())
