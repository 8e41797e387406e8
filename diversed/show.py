"""Completions side by side across methods: what a lossy setting changed, example by example; and
every record and per-example row of runs as tables for pandas and other tools.

    python -m diversed.show RUN_DIR [RUN_DIR ...] [--examples ID ...] [--n 3] [--temperature 1.0]
                                    [--num-draft-tokens 5] [--methods lossless static] [--all]
    python -m diversed.show RUN_DIR [RUN_DIR ...] --export out.parquet   # or out.csv, out.jsonl
    (plugins=my_pkg.my_method: the module that registers a method of one's own the records name)

Reads the records and per-example rows of run directories (`results.load_runs`: a multirun's folder
holds its jobs' directories; a point in several is read once). For each chosen example it
prints the prompt's end and the reference once, then one line per grid point: the method with its
knob, the score, what the task extracted (the number, the program) and the completion. By default
it picks the first examples on which the points disagree in score or extraction (`--all`: the
first ones whatever they say), at the temperature and N with the most points. Each point's rows are
read twice, one file at a time: once to choose the examples (keeping what each first said), once to
keep the chosen examples' rows; the others are never held (and points without rows are found by
listing the examples directory once, `results.with_examples`).

What it prints comes from files anyone may have written: every character that would act on a
terminal rather than show (ANSI escapes and other C0/C1 controls such as ESC, BEL and \r, bidi
overrides and isolates, line and paragraph separators, lone surrogates) is printed as a visible
escape (`\x1b`, `\u202e`), in completions, prompts, references, labels, ids and paths alike
(`visible`). A completion's newlines show as ⏎ on its one line; tabs stay. The escapes are for the
eye, not reversible: a backslash in the text is printed as it is.

`export` writes two tables in the format the file's extension names (.parquet, .csv, .jsonl): the
records (`results.load_runs`: one row per grid point, with `run_dir`; nested fields such as `timing`
flattened into dotted columns, `timing.batch_size`) to the file itself, and every per-example row,
with its record's `run_dir` and `key`, to `<name>.examples<ext>` beside it; join them on both.

It changes nothing in a run directory; nothing is decoded or rescored.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from diversed.errors import ConfigError, MissingFile, cli
from diversed.files.atomic import write_file
from diversed.sweep.methods import METHODS
from diversed.sweep.plugins import add_plugin_option, parse_args
from diversed.sweep.results import load_runs, read_examples, with_examples

EXPORT_FORMATS = (".parquet", ".csv", ".jsonl")


def _label(record: dict[str, Any]) -> str:
    name = record["method"]
    text = METHODS[name].describe(record)
    n = record.get("num_draft_tokens")
    return text + (f", N={n}" if n is not None else "")


# What a terminal acts on instead of showing: C0 controls but tab and newline, DEL and C1 controls; the
# Arabic letter mark, LRM/RLM, LRE..RLO, LRI..PDI (bidi: text shown reordered); line and paragraph
# separators; lone surrogates (no UTF-8 terminal can take them: print would fail)
_HIDDEN = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with each character a terminal would act on (see `_HIDDEN`: ESC, BEL, \\r, bidi overrides,
    ...) written as a visible escape, `\\x1b`, `\\u202e`; tabs and newlines kept. It does not escape
    backslashes (so it is not reversible) or touch printable text."""
    return _HIDDEN.sub(_escape, text) if _HIDDEN.search(text) else text


def _clip(text: Any, width: int) -> str:
    text = "∅" if text is None else visible(str(text).replace("\n", "⏎"))
    return text if len(text) <= width else text[: width - 1] + "…"


def _most(values: Sequence[Any]) -> Any:
    """The most common value but None (the smallest of those tied), or None."""
    counts = Counter(v for v in values if v is not None)
    return max(counts, key=lambda v: (counts[v], -v)) if counts else None


def choose(
    records: list[dict[str, Any]], temperature: float | None, n: int | None, methods: Sequence[str] | None
):
    """The records to compare: one temperature and N (the most common by default), the asked methods."""
    if temperature is None:
        temperature = _most([r["temperature"] for r in records])
    picked = [r for r in records if r["temperature"] == temperature]
    if n is None:
        n = _most([r.get("num_draft_tokens") for r in picked])
    picked = [r for r in picked if r.get("num_draft_tokens") in (None, n)]
    if methods:
        picked = [r for r in picked if r["method"] in methods]
    return sorted(picked, key=_order), temperature, n


def _order(record: dict[str, Any]) -> tuple:
    """Methods in the registry's order; within one, its family's knob from the largest value down, the others
    in order of their values."""
    order = list(METHODS)
    m = METHODS.get(record["method"])
    if m is None:
        return len(order), record["method"], ()
    ranks = tuple(
        -float(v) if k.field == m.family and isinstance(v, int | float) else str(v)
        for k in m.knobs
        for v in [record.get(k.field)]
    )
    return order.index(m.name), "", ranks


def show(
    run_dirs: str | Path | Sequence[str | Path],
    *,
    examples: Sequence[str] = (),
    count: int = 3,
    temperature: float | None = None,
    num_draft_tokens: int | None = None,
    methods: Sequence[str] | None = None,
    everything: bool = False,
    width: int = 100,
) -> str:
    """The side-by-side text (see the module docstring) of the records of one run directory or several
    (a multirun's folder: its jobs' points side by side, a point two jobs share shown once)."""
    dirs = [run_dirs] if isinstance(run_dirs, str | Path) else list(run_dirs)
    where = ", ".join(map(str, dirs))
    try:
        frame = load_runs(*dirs)
    except MissingFile:
        frame = pd.DataFrame()
    if frame.empty:
        raise MissingFile(
            f"{where}: no run records (results.jsonl) there; give a run directory of "
            "python -m diversed.evaluate (or a multirun's folder)"
        )
    found = frame.astype(object).where(frame.notna(), None).to_dict("records")
    records, temperature, n = choose(found, temperature, num_draft_tokens, methods)
    if not records:
        raise ConfigError(
            f"{where}: no records to show at temperature {temperature}, N {n} (of --temperature, "
            "--num-draft-tokens, --methods)"
        )
    have: set[tuple[str, str]] = set()
    for d in dict.fromkeys(r["run_dir"] for r in records):
        have |= {(d, k) for k in with_examples(d, (r["key"] for r in records if r["run_dir"] == d))}
    points = [(r["run_dir"], r["key"]) for r in records if (r["run_dir"], r["key"]) in have]
    ids = [str(i) for i in examples] if examples else _pick(points, count, everything)
    wanted = set(ids)
    rows = {
        (r["run_dir"], r["key"]): {
            e["example_id"]: e for e in read_examples(r["run_dir"], r["key"]) if e["example_id"] in wanted
        }
        if (r["run_dir"], r["key"]) in have
        else {}
        for r in records
    }
    out = [f"{where}: {len(records)} points at temperature {temperature:g}" + (f", N = {n}" if n else "")]
    for i in ids:
        out += _example(i, records, rows, width)
    return visible("\n".join(out))  # labels, ids and the path too


def _example(i: str, records: list[dict], rows: dict, width: int) -> list[str]:
    """Example `i`'s lines: its prompt's end and reference, then each record's completion (`rows`:
    each point's rows by example id)."""
    first = next((rows[_at(r)][i] for r in records if i in rows[_at(r)]), None)
    if first is None:
        return [f"\n== example {i}: not in these records"]
    labels = [_label(r) for r in records]
    pad = max(map(len, labels), default=10)
    prompt = str(first.get("prompt", "")).strip()
    out = [f"\n== example {i}"]
    if prompt:
        cut = first.get("prompt_tokens_cut")  # task.max_prompt_tokens: the row holds what the model saw
        out.append(
            "prompt    …"
            + _clip(prompt[-300:], width)
            + (f"  ({cut} tokens cut from its start)" if cut else "")
        )
    out.append("reference " + _clip(first.get("reference"), width))
    for label, r in zip(labels, records, strict=True):
        e = rows[_at(r)].get(i)
        if e is None:
            out.append(f"  {label:<{pad}}  (no row)")
            continue
        out.append(
            f"  {label:<{pad}}  score {e.get('score', float('nan')):.3g}  "
            f"extracted {_clip(e.get('extracted'), 24)}"
        )
        out.append(textwrap.indent(_clip(e.get("completion"), width), " " * (pad + 4)))
    return out


def _at(record: dict[str, Any]) -> tuple[str, str]:
    return record["run_dir"], record["key"]


def _pick(points: Sequence[tuple[str, str]], count: int, everything: bool) -> list[Any]:
    """The first `count` example ids of the rows of `points` (run directory, key; in the order the points
    first name them) on which the points disagree in score or extraction, else (or with `everything`) the
    first ones. Reads one point's rows at a time and keeps, per example, only what the first point said."""
    first: dict[Any, tuple[Any, str]] = {}
    differing: set[Any] = set()
    for run_dir, key in points:
        for i, e in {e["example_id"]: e for e in read_examples(run_dir, key)}.items():
            said = (e.get("score"), str(e.get("extracted")))
            if first.setdefault(i, said) != said:
                differing.add(i)
    ids = list(first)
    if not everything:
        ids = [i for i in ids if i in differing] or ids
    return ids[:count]


# ----------------------------------------------------------------------------- export


def examples_file(out: str | Path) -> Path:
    """Where `export` writes the per-example rows of `out`'s records: out.parquet -> out.examples.parquet."""
    out = Path(out)
    return out.with_name(f"{out.stem}.examples{out.suffix}")


def flatten(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with each column of dicts (a record's `timing`) as one dotted column per key
    (`timing.warmup`)."""
    parts = []
    for name, column in df.items():
        if column.map(lambda v: isinstance(v, dict)).any():
            wide = pd.json_normalize([v if isinstance(v, dict) else {} for v in column], sep=".")
            parts.append(wide.add_prefix(f"{name}.").set_axis(df.index))
        else:
            parts.append(column.to_frame())
    return pd.concat(parts, axis=1) if parts else df


def _json_cells(df: pd.DataFrame, *, arrow: bool) -> pd.DataFrame:
    """Object columns a format cannot hold as they are, as JSON text: for CSV those with lists or dicts;
    for Parquet those with mixed values (what a task extracted: a number here, a string there)."""
    df = df.copy()
    for name, column in df.items():
        if column.dtype != object:
            continue
        if arrow:
            try:
                pa.array(column, from_pandas=True)
                continue
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass
        elif not column.map(lambda v: isinstance(v, list | dict)).any():
            continue
        df[name] = column.map(lambda v: None if v is None else json.dumps(v, ensure_ascii=False, default=str))
    return df


def _write_table(df: pd.DataFrame, path: Path) -> None:
    """`df` in the format `path`'s extension names, written whole or not at all (`atomic.write_file`)."""
    if path.suffix == ".parquet":
        write_file(path, lambda f: _json_cells(df, arrow=True).to_parquet(f, index=False))
    elif path.suffix == ".csv":
        write_file(path, _json_cells(df, arrow=False).to_csv(index=False))
    else:
        write_file(path, df.to_json(orient="records", lines=True, force_ascii=False))


def export(run_dirs: Sequence[str | Path], out: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write every record of the run dirs to `out` and their per-example rows to `examples_file(out)`
    (module docstring); returns both tables as written (before any cell became JSON text)."""
    out = Path(out)
    if out.suffix not in EXPORT_FORMATS:
        raise ConfigError(
            f"--export {out}: its extension names the format; use one of {', '.join(EXPORT_FORMATS)}"
        )
    records = flatten(load_runs(*run_dirs))
    rows = [
        {"run_dir": r["run_dir"], **e}
        for r in records[["run_dir", "key"]].to_dict("records")
        for e in read_examples(r["run_dir"], r["key"])
    ]
    examples = pd.DataFrame(rows, columns=None if rows else ["run_dir", "key", "example_id"])
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_table(records, out)
    _write_table(examples, examples_file(out))
    return records, examples


def run(argv: list[str] | None = None) -> str:
    """`python -m diversed.show`: the text printed."""
    parser = argparse.ArgumentParser(prog="python -m diversed.show", description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dirs",
        nargs="+",
        metavar="run_dir",
        help="run directories of python -m diversed.evaluate, or a multirun's folder",
    )
    parser.add_argument(
        "--export",
        metavar="FILE",
        default=None,
        help=f"write every record to FILE and every per-example row to FILE's name + .examples; "
        f"the extension says the format ({', '.join(EXPORT_FORMATS)})",
    )
    parser.add_argument("--examples", nargs="*", default=[], help="example ids (the dataset's own) to show")
    parser.add_argument("--n", type=int, default=3, help="how many examples (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--num-draft-tokens", type=int, default=None)
    parser.add_argument("--methods", nargs="*", default=None, help="the methods to show (default: every one)")
    parser.add_argument(
        "--all", action="store_true", help="the first examples, not only those where points disagree"
    )
    parser.add_argument("--width", type=int, default=100)
    add_plugin_option(parser)
    args = parse_args(parser, argv)  # plugins=... loaded first
    if args.export is not None:
        if Path(args.export).suffix not in EXPORT_FORMATS:
            parser.error(
                f"--export {args.export}: the extension names the format; "
                f"use one of {', '.join(EXPORT_FORMATS)}"
            )
        records, examples = export(args.run_dirs, args.export)
        text = (
            f"{len(records)} records to {args.export}, {len(examples)} per-example rows to "
            f"{examples_file(args.export)}"
        )
    else:
        text = show(
            args.run_dirs,
            examples=args.examples,
            count=args.n,
            temperature=args.temperature,
            num_draft_tokens=args.num_draft_tokens,
            methods=args.methods,
            everything=args.all,
            width=args.width,
        )
    text = visible(text)  # (the export's message names the paths given)
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
