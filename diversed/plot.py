"""Pareto plots and the summary table (the paper's Table 1) from run records.

    python -m diversed.plot outputs/ [--out outputs/plots] [plugins=my_pkg.my_method]
        [--formats png pdf] [--figsize 12.5 4.8] [--style seaborn-v0_8-paper]
        [--methods static dynamic autoregressive] [--label "dynamic=DIVERSED (ours)"]

`plot_pareto` draws one figure per (pair, task, temperature), a row of two panels per draft length N:
quality on x in both, acceptance rate (higher is better) on the left, wall time normalised by
autoregressive decoding (lower is better) on the right. Each method has one colour in every figure
(`drawing.METHOD_COLOURS`, the report's figures too). Each knob family (the static ensemble over w,
lossy SD over l, ..., a method of one's own over its family knob: `Method.family`) is a line over its
knob (points labelled with its value where the label overlaps nothing, the legend naming the knob's
symbol) with its Pareto front drawn thick; DIVERSED (a marker per head, named by the task it was
trained on), lossless SD and the other methods without a family are single markers; autoregressive
decoding is a hollow marker drawn on top (it has no acceptance rate, so the left panel shows its
quality as a vertical line). Faint horizontal bars are the 95 % interval of the quality where the
records hold one. Seeds of one setting are averaged (their interval bounds too, a rough guide). Both
functions take the frame `load_results` returns; they live in `analysis/drawing.py`, which a notebook
imports too (`from diversed.plot import plot_pareto, summary_table` also works).

Every option is checked before a record is read: a bad value is a user error (exit status 2) that names
it and the values it may take. It draws only what the records hold: it neither runs nor rescores
anything. Figures are made on the Agg canvas without pyplot, so importing this module leaves the
matplotlib backend alone (`--style` applies while the figures are drawn, and only then).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from matplotlib import style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from diversed.analysis.drawing import plot_pareto, summary_table, write_table
from diversed.errors import ConfigError, cli
from diversed.sweep.methods import METHODS
from diversed.sweep.plugins import add_plugin_option, parse_args
from diversed.sweep.results import load_results, with_head_task

MAX_INCHES = 60.0  # a figure side beyond this is a typo (and a canvas of gigabytes)


# ----------------------------------------------------------------------------- the options


def check_formats(formats: Sequence[str]) -> list[str]:
    """The file formats, lower case; ConfigError naming a format matplotlib cannot write and those it can."""
    known = sorted(FigureCanvasAgg(Figure()).get_supported_filetypes())
    bad = [f for f in formats if f.lower() not in known]
    if bad:
        raise ConfigError(f"--formats {' '.join(bad)}: not a figure format; give some of {', '.join(known)}")
    return [f.lower() for f in formats]


def check_figsize(figsize: Sequence[float] | None) -> tuple[float, float] | None:
    """(width, height of one row of panels) in inches; ConfigError unless both are in (0, MAX_INCHES]."""
    if figsize is None:
        return None
    if not all(0 < v <= MAX_INCHES for v in figsize):
        raise ConfigError(
            f"--figsize {' '.join(f'{v:g}' for v in figsize)}: give a width and a height in inches, each in "
            f"(0, {MAX_INCHES:g}], e.g. --figsize 7 3 (the height is that of one row of panels)"
        )
    return float(figsize[0]), float(figsize[1])


def check_style(name: str | None) -> str | None:
    """A matplotlib style name ("default" or one of `matplotlib.style.available`) or a .mplstyle file;
    ConfigError listing the available ones."""
    if name is None or name == "default" or name in style.available:
        return name
    if name.endswith(".mplstyle") and Path(name).is_file():
        return name
    raise ConfigError(
        f"--style {name}: no such matplotlib style; give default, a .mplstyle file or one of "
        f"{', '.join(sorted(style.available))}"
    )


def check_methods(methods: Sequence[str] | None, where: str = "--methods") -> list[str] | None:
    """The method names, each registered (plugins loaded first); ConfigError naming the registered ones."""
    if methods is None:
        return None
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(
            f"{where}: unknown method {', '.join(map(repr, unknown))}; give some of {', '.join(METHODS)} "
            "(a method of your own: load it with plugins=MODULE)"
        )
    return list(methods)


def parse_labels(labels: Sequence[str]) -> dict[str, str]:
    """`--label METHOD=TEXT` options as {method: text}; ConfigError for one without `=`, an unknown
    method or an empty text."""
    out = {}
    for item in labels:
        method, sep, text = item.partition("=")
        if not sep or not text.strip():
            raise ConfigError(f"--label {item!r}: give METHOD=TEXT, e.g. --label 'dynamic=DIVERSED (ours)'")
        check_methods([method.strip()], where=f"--label {item!r}")
        out[method.strip()] = text.strip()
    return out


# ----------------------------------------------------------------------------- the entry point


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m diversed.plot", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="results.jsonl/.parquet files or run directories")
    parser.add_argument("--out", default="outputs/plots", help="output directory (default: %(default)s)")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"], help="figure file formats")
    parser.add_argument(
        "--figsize",
        nargs=2,
        type=float,
        metavar=("WIDTH", "HEIGHT"),
        help="inches; HEIGHT is one row of panels, a row per draft length N (default: 12.5 4.8)",
    )
    parser.add_argument("--style", help="a matplotlib style, e.g. seaborn-v0_8-paper (default: matplotlib's)")
    parser.add_argument(
        "--methods", nargs="+", metavar="METHOD", help="draw only these methods (default: all)"
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="METHOD=TEXT",
        help="rename a method in legends, e.g. 'dynamic=DIVERSED (ours)' (repeatable)",
    )
    parser.add_argument(
        "--num-draft-tokens", type=int, default=None, help="N of the table (default: most rows)"
    )
    parser.add_argument(
        "--temperature", type=float, default=None, help="temperature of the table (default: most rows)"
    )
    add_plugin_option(parser)
    return parser


def run(argv: Sequence[str] | None = None) -> list[Path]:
    """`python -m diversed.plot`: the figures and tables written (printed, one a line)."""
    parser = _parser()
    args = parse_args(parser, argv)  # plugins=... loaded first
    look = dict(
        formats=check_formats(args.formats),
        figsize=check_figsize(args.figsize),
        style_name=check_style(args.style),
        methods=check_methods(args.methods),
        labels=parse_labels(args.label),
    )

    df = load_results(*args.results)
    if df.empty:
        parser.error(
            f"no run records in {', '.join(args.results)}: give run directories of python -m "
            "diversed.evaluate (or their results.jsonl / .parquet files)"
        )
    if look["methods"] is not None and not set(look["methods"]) & set(df["method"]):
        raise ConfigError(
            f"--methods {' '.join(look['methods'])}: none of them is in these records; they hold "
            f"{', '.join(sorted(set(df['method'])))}"
        )
    paths = plot_pareto(with_head_task(df), args.out, **look)
    slice_ = {"num_draft_tokens": args.num_draft_tokens, "temperature": args.temperature}
    paths += write_table(summary_table(df, **slice_, best=True), args.out)  # each family's best at AR quality
    paths += write_table(summary_table(df, **slice_), args.out, name="table_all")  # every setting
    for p in paths:
        print(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
