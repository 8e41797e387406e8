"""Pareto plots and the summary table (the paper's Table 1) from run records.

    python -m diversed.plot outputs/ [--out outputs/plots] [--plugin my_pkg.my_method]

`plot_pareto` draws one figure per (pair, task, temperature): quality on x in both panels,
acceptance rate (higher is better) on the left, wall time normalised by autoregressive decoding
(lower is better) on the right; colour is the draft length N. Each knob family (the static
ensemble over w, lossy SD over l, ..., a method of one's own over its family knob: `Method.family`)
is a line over its knob (points labelled with its value, the legend naming the knob's symbol) with
its Pareto front drawn thick; dynamic heads, lossless SD and the other methods without a family,
and autoregressive decoding are single markers (autoregressive has no acceptance rate, so the
left panel shows its quality as a vertical line). Faint horizontal bars are the 95% CI of the
quality. Seeds of one setting are averaged (their CI bounds too, which is only a rough guide).
Both functions take the frame `load_results` returns; they live in `analysis/drawing.py`, which a
notebook imports too (`from diversed.plot import plot_pareto, summary_table` also works).

It draws only what the records hold: it neither runs nor rescores anything. Figures are made
on the Agg canvas without pyplot, so importing this module leaves the matplotlib backend alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from diversed.analysis.drawing import plot_pareto, summary_table, write_table
from diversed.errors import cli
from diversed.sweep.methods import add_plugin_option, load_plugins
from diversed.sweep.results import load_results


def run(argv: Sequence[str] | None = None) -> list[Path]:
    """`python -m diversed.plot`: the figures and tables written (printed, one a line)."""
    parser = argparse.ArgumentParser(prog="python -m diversed.plot", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="results.jsonl/.parquet files or run directories")
    parser.add_argument("--out", default="outputs/plots", help="output directory (default: %(default)s)")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"])
    parser.add_argument(
        "--num-draft-tokens", type=int, default=None, help="N of the table (default: most rows)"
    )
    parser.add_argument(
        "--temperature", type=float, default=None, help="temperature of the table (default: most rows)"
    )
    add_plugin_option(parser)
    args = parser.parse_args(argv)
    load_plugins(args.plugin, where="--plugin")

    df = load_results(*args.results)
    if df.empty:
        parser.error(f"no run records found in {args.results}")
    paths = plot_pareto(df, args.out, formats=args.formats)
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
