"""Completions side by side across methods: what a lossy setting changed, example by example.

    python -m diversed.show RUN_DIR [--examples ID ...] [--n 3] [--temperature 1.0]
                                    [--num-draft-tokens 5] [--methods lossless static] [--all]

Reads a run directory's records and per-example rows (`results.py`). For each chosen example it
prints the prompt's end and the reference once, then one line per grid point: the method with its
knob, the score, what the task extracted (the number, the program) and the completion. By default
it picks the first examples on which the points disagree in score or extraction (`--all`: the
first ones whatever they say), at the temperature and N with the most points.

It reads only; nothing is decoded or rescored.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diversed.errors import ConfigError, MissingFile, cli
from diversed.methods import METHOD_NAMES, METHODS
from diversed.results import read_examples, read_records


def _label(record: dict[str, Any]) -> str:
    name = record["method"]
    text = METHODS[name].describe(record) if name in METHODS else name
    n = record.get("num_draft_tokens")
    return text + (f", N={n}" if n is not None else "")


def _clip(text: Any, width: int) -> str:
    text = "∅" if text is None else str(text).replace("\n", "⏎")
    return text if len(text) <= width else text[: width - 1] + "…"


def _most(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return max(set(values), key=lambda v: (values.count(v), -v)) if values else None


def choose(records: list[dict[str, Any]], temperature: float | None, n: int | None, methods: Sequence[str] | None):
    """The records to compare: one temperature and N (the most common by default), the asked methods."""
    if temperature is None:
        temperature = _most([r["temperature"] for r in records])
    picked = [r for r in records if r["temperature"] == temperature]
    if n is None:
        n = _most([r.get("num_draft_tokens") for r in picked])
    picked = [r for r in picked if r.get("num_draft_tokens") in (None, n)]
    if methods:
        picked = [r for r in picked if r["method"] in methods]
    order = {m: i for i, m in enumerate(METHOD_NAMES)}
    return sorted(picked, key=lambda r: (order.get(r["method"], 99), -(r.get("weight") or 0.0), str(r.get("head")))), temperature, n


def show(run_dir: str | Path, *, examples: Sequence[str] = (), count: int = 3, temperature: float | None = None,
         num_draft_tokens: int | None = None, methods: Sequence[str] | None = None, everything: bool = False,
         width: int = 100) -> str:  # fmt: skip
    """The side-by-side text (see the module docstring)."""
    found = read_records(run_dir)
    if not found:
        raise MissingFile(f"{run_dir}: no run records (results.jsonl) there; give a run directory of "
                          "python -m diversed.evaluate")  # fmt: skip
    records, temperature, n = choose(found, temperature, num_draft_tokens, methods)
    if not records:
        raise ConfigError(f"{run_dir}: no records to show at temperature {temperature}, N {n} (of --temperature, "
                          "--num-draft-tokens, --methods)")  # fmt: skip
    rows = {r["key"]: {e["example_id"]: e for e in read_examples(run_dir, r["key"])} for r in records}
    ids = list(dict.fromkeys(i for r in records for i in rows[r["key"]]))
    if examples:
        ids = [str(i) for i in examples]
    elif not everything:
        def differs(i: str) -> bool:
            seen = {(e.get("score"), str(e.get("extracted"))) for k in rows if (e := rows[k].get(i))}
            return len(seen) > 1

        ids = [i for i in ids if differs(i)] or ids
    ids = ids[:count] if not examples else ids
    labels = [_label(r) for r in records]
    pad = max(map(len, labels), default=10)
    out = [f"{Path(run_dir)}: {len(records)} points at temperature {temperature:g}" + (f", N = {n}" if n else "")]
    for i in ids:
        first = next((rows[r["key"]][i] for r in records if i in rows[r["key"]]), None)
        if first is None:
            out.append(f"\n== example {i}: not in these records")
            continue
        prompt = str(first.get("prompt", "")).strip()
        out.append(f"\n== example {i}")
        if prompt:
            out.append("prompt    …" + _clip(prompt[-300:], width))
        out.append("reference " + _clip(first.get("reference"), width))
        for label, r in zip(labels, records, strict=True):
            e = rows[r["key"]].get(i)
            if e is None:
                out.append(f"  {label:<{pad}}  (no row)")
                continue
            out.append(f"  {label:<{pad}}  score {e.get('score', float('nan')):.3g}  extracted {_clip(e.get('extracted'), 24)}")
            out.append(textwrap.indent(_clip(e.get("completion"), width), " " * (pad + 4)))
    return "\n".join(out)


def run(argv: list[str] | None = None) -> str:
    """`python -m diversed.show`: the text printed."""
    parser = argparse.ArgumentParser(prog="python -m diversed.show", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run directory of python -m diversed.evaluate")
    parser.add_argument("--examples", nargs="*", default=[], help="example ids (the dataset's own) to show")
    parser.add_argument("--n", type=int, default=3, help="how many examples (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--num-draft-tokens", type=int, default=None)
    parser.add_argument("--methods", nargs="*", default=None, help=f"of {', '.join(METHOD_NAMES)}")
    parser.add_argument("--all", action="store_true", help="the first examples, not only those where points disagree")
    parser.add_argument("--width", type=int, default=100)
    args = parser.parse_args(argv)
    text = show(args.run_dir, examples=args.examples, count=args.n, temperature=args.temperature,
                num_draft_tokens=args.num_draft_tokens, methods=args.methods, everything=args.all, width=args.width)  # fmt: skip
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
