"""Drawing records: Pareto fronts (quality and time against acceptance, one line per knob family) and the
summary table, as functions a notebook and `python -m diversed.plot` both call. Reads frames of
records (`sweep.results.load_results`); it does not choose settings (`analysis.fronts`) or make the
report's tables (`analysis.tables`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from diversed.analysis.compare import mean_over_seeds
from diversed.analysis.fronts import best_at_quality, choice_key, pareto_front
from diversed.files.atomic import write_file
from diversed.sweep.methods import METHODS, knobs

_HEAD_MARKERS = ("*", "D", "P", "X", "v", "^", "<", ">")


def method_label(method: str, weight: float | None = None, head: str | None = None, **knobs: object) -> str:
    """The row label of the summary table, e.g. "Static w=0.5", "DIVERSED (llama/head)"."""
    if method not in METHODS:
        return str(method)
    return METHODS[method].describe({"weight": weight, "head": head, **knobs})


def safe_name(name: object) -> str:
    """`name` as part of a file name: runs of other characters than letters, digits and ._=- become -."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", str(name)).strip("-")


def _most_rows(values: pd.Series) -> object:
    """The value with the most rows, the smallest one on ties; None if there is none."""
    counts = values.dropna().value_counts()
    if counts.empty:
        return None
    return min(counts.index[counts == counts.max()])


def _singles() -> list[str]:
    """The speculative methods drawn as one marker per setting: those without a knob family, but DIVERSED."""
    return [name for name, m in METHODS.items() if m.speculative and m.family is None and name != "dynamic"]


def _references() -> list[str]:
    """The non-speculative methods drawn as markers in the time panel: all but autoregressive decoding."""
    return [name for name, m in METHODS.items() if not m.speculative and name != "autoregressive"]


def _lines(d: pd.DataFrame) -> list[tuple[str, dict[str, object], pd.DataFrame]]:
    """Each family line of a frame: (method, the other knobs' values, its rows in knob order)."""
    out = []
    for name, m in METHODS.items():
        rows = d[d["method"] == name]
        if m.family is None or rows.empty:
            continue
        others = [k for k in m.fields if k != m.family]
        groups = rows.groupby(others, dropna=False, sort=True) if others else [((), rows)]
        for values, g in groups:
            values = values if isinstance(values, tuple) else (values,)
            out.append((name, dict(zip(others, values, strict=True)), g.sort_values(m.family)))
    return out


def _line_label(name: str, others: dict[str, object]) -> str:
    """ "cascade rule=chow, α labelled": the method, its other knobs' values, the symbol of the knob on
    the points."""
    m = METHODS[name]
    knobs = ", ".join(f"{m.knob(k).symbol}={m.knob(k).show(v)}" for k, v in others.items())
    return f"{name.replace('_', ' ')}{' ' + knobs if knobs else ''}, {m.knob(m.family).symbol} labelled"


def _draw_panel(
    ax, d: pd.DataFrame, y: str, colors: dict, heads: dict, *, minimize: bool, chosen: dict | None = None
) -> None:
    """One panel: quality (x) against `y` for every method of one (pair, task, temperature): each
    knob family as a line over its knob (values labelled) with its Pareto front drawn thick, the
    setting `chosen` for it ringed (`choice_key` -> the chosen knob value), the other methods as markers."""
    ar = d[d["method"] == "autoregressive"]
    for _, r in ar.iterrows():
        if y == "acceptance_rate" or pd.isna(r[y]):  # no acceptance rate: mark its quality
            ax.axvline(r["score"], color="0.35", ls="--", lw=1.2, zorder=1)
        else:
            ax.plot(r["score"], r[y], "X", color="black", ms=10, zorder=4)
    if y == "normalized_time":
        ax.axhline(1.0, color="0.7", ls=":", lw=1, zorder=0)
        for _, r in d[d["method"].isin(_references()) & d[y].notna()].iterrows():
            ax.plot(r["score"], r[y], METHODS[r["method"]].marker, color="0.3", ms=9, zorder=4)

    for n, color in colors.items():
        dn = d[(d["num_draft_tokens"] == n) & d[y].notna()]
        for name, _, line in _lines(dn):
            marker, style, family = METHODS[name].marker, METHODS[name].line, METHODS[name].family
            ax.plot(
                line["score"], line[y], marker=marker, ls=style, color=color, ms=4, lw=1, alpha=0.8, zorder=3
            )
            for _, r in line.iterrows():
                ax.annotate(
                    f"{r[family]:g}",
                    (r["score"], r[y]),
                    xytext=(3, 3),
                    textcoords="offset points",
                    fontsize=6,
                    color=color,
                )
            for _, r in line.iterrows():
                value = (chosen or {}).get(choice_key(r))
                if value is not None and np.isclose(float(r[family]), float(value)):
                    ax.plot(r["score"], r[y], "o", mfc="none", mec=color, mew=1.8, ms=14, zorder=5)
            front = pareto_front(line, "score", y, maximize=(True, not minimize))
            ax.plot(
                front["score"], front[y], "-", color=color, lw=5, alpha=0.2, solid_capstyle="round", zorder=2
            )
        for name in _singles():
            for _, r in dn[dn["method"] == name].iterrows():
                ax.plot(r["score"], r[y], METHODS[name].marker, color=color, mec="black", ms=8, zorder=4)
        for _, r in dn[dn["method"] == "dynamic"].iterrows():
            ax.plot(r["score"], r[y], heads[r["head"]], color=color, mec="black", ms=12, zorder=5)

    # Horizontal 95% CI of the quality, faint so that it does not hide the curves.
    pts = d[d[y].notna() & d["score_ci_low"].notna() & d["score_ci_high"].notna()]
    if len(pts):
        err = np.vstack([pts["score"] - pts["score_ci_low"], pts["score_ci_high"] - pts["score"]]).clip(min=0)
        ax.errorbar(
            pts["score"], pts[y], xerr=err, fmt="none", ecolor="0.6", elinewidth=0.6, alpha=0.5, zorder=1
        )
    if not d[y].notna().any():
        ax.text(0.5, 0.5, f"no {y} in these records", transform=ax.transAxes, ha="center", color="0.4")
    ax.grid(alpha=0.3)


def _legend(colors: dict, heads: dict, d: pd.DataFrame, chosen: bool = False) -> list[Line2D]:
    """Legend entries for the draft lengths and the methods present in the figure; a family's
    entry names its knob."""

    def handle(marker: str, color: str, label: str, **kw) -> Line2D:
        return Line2D([], [], marker=marker, color=color, label=label, **kw)

    methods = set(d["method"])
    out = [handle("", c, f"N = {n}", lw=4) for n, c in colors.items()]
    seen = set()
    for name, others, _ in _lines(d):
        label = _line_label(name, others)
        if label not in seen:
            seen.add(label)
            out.append(handle(METHODS[name].marker, "0.3", label, ms=4, lw=1, ls=METHODS[name].line))
    if seen:
        out.append(handle("", "0.3", "each line's Pareto front", lw=5, alpha=0.2))
    if seen and chosen:
        out.append(handle("o", "0.3", "the setting chosen on validation", ls="", mfc="none", mew=1.8, ms=11))
    for name in _singles() + _references():
        if name in methods:
            out.append(handle(METHODS[name].marker, "0.5", METHODS[name].name_only, ls="", mec="black", ms=8))
    out += [
        handle(m, "0.5", method_label("dynamic", head=h), ls="", mec="black", ms=11) for h, m in heads.items()
    ]
    if "autoregressive" in methods:
        out += [
            handle("X", "black", "autoregressive", ls="", ms=9),
            handle("", "0.35", "autoregressive quality", ls="--", lw=1.2),
        ]
    return out


def plot_pareto(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    formats: Sequence[str] = ("png", "pdf"),
    choices: pd.DataFrame | None = None,
) -> list[Path]:
    """Write one figure per (pair, task, temperature) in each of `formats`; returns the paths. Each knob
    family is drawn as its whole line with its front; with `choices` (`fronts.choose_on` on a validation
    run) the setting chosen for each line is ringed.

    Files are named `pareto_<pair>_<task>_T<temperature>.<format>` under `out_dir`.
    """
    chosen = (
        {choice_key(c): c["value"] for _, c in choices.iterrows()}
        if choices is not None and len(choices)
        else {}
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    d = mean_over_seeds(df)
    d["settings_group"] = d["settings_group"].fillna("")
    paths: list[Path] = []
    groups = d.groupby(["pair", "task", "temperature"])["settings_group"].nunique()
    for (pair, task, temp, settings), g in d.groupby(
        ["pair", "task", "temperature", "settings_group"], sort=True
    ):
        several = groups[(pair, task, temp)] > 1  # settings that differ: one figure each, named apart
        ns = sorted(int(n) for n in g["num_draft_tokens"].dropna().unique())
        colors = {n: f"C{i % 10}" for i, n in enumerate(ns)}
        head_names = sorted(str(h) for h in g["head"].dropna().unique())
        heads = {h: _HEAD_MARKERS[i % len(_HEAD_MARKERS)] for i, h in enumerate(head_names)}
        metric = g["metric"].dropna().iloc[0] if g["metric"].notna().any() else "score"

        fig = Figure(figsize=(12.5, 4.8), layout="constrained")
        FigureCanvasAgg(fig)
        ax_acc, ax_time = fig.subplots(1, 2, sharex=True)
        _draw_panel(ax_acc, g, "acceptance_rate", colors, heads, minimize=False, chosen=chosen)
        _draw_panel(ax_time, g, "normalized_time", colors, heads, minimize=True, chosen=chosen)
        ax_acc.set(
            xlabel=f"{task} {metric} (higher is better)",
            ylabel="acceptance: accepted / proposed drafts (higher is better)",
        )
        ax_time.set(
            xlabel=f"{task} {metric} (higher is better)",
            ylabel="time / autoregressive time (lower is better)",
        )
        mode = "greedy" if temp == 0 else "sampling"
        fig.suptitle(
            f"{pair} · {task} · temperature {temp:g} ({mode})"
            + (f" · settings {settings[:6] or 'old'}" if several else "")
        )
        fig.legend(
            handles=_legend(colors, heads, g, chosen=bool(chosen)),
            loc="outside right upper",
            fontsize=8,
            frameon=False,
        )
        stem = f"pareto_{safe_name(pair)}_{safe_name(task)}_T{temp:g}" + (
            f"_s{settings[:6] or 'old'}" if several else ""
        )
        for fmt in formats:  # each file whole or not at all
            paths.append(
                write_file(
                    out_dir / f"{stem}.{fmt}", lambda f, fig=fig, fmt=fmt: fig.savefig(f, format=fmt, dpi=150)
                )
            )
    return paths


def summary_table(
    df: pd.DataFrame,
    *,
    num_draft_tokens: int | None = None,
    temperature: float | None = None,
    best: bool = False,
) -> pd.DataFrame:
    """The paper's Table 1: rows (pair, method label), columns (task, "acceptance_rate") and
    (task, <metric>), each the mean over seeds.

    One draft length and temperature per table: by default the temperature with the most rows,
    then the N with the most rows at that temperature (autoregressive rows have no N and are
    kept). The choice is stored in `table.attrs`. Rows in the registry's order (`methods.METHODS`), a
    family's settings from the largest knob down. With `best`, each knob family keeps only its
    best setting at the quality of autoregressive decoding (`fronts.best_at_quality`).
    """
    if temperature is None:
        temperature = _most_rows(df["temperature"])
    d = df[np.isclose(df["temperature"].astype(float), float(temperature))]
    if num_draft_tokens is None:
        num_draft_tokens = _most_rows(d.loc[d["method"] != "autoregressive", "num_draft_tokens"])
    d = d[
        ~d["method"].map(lambda m: METHODS[m].speculative if m in METHODS else True)
        | (d["num_draft_tokens"] == num_draft_tokens)
    ]
    d = mean_over_seeds(d)
    if best:
        d = best_at_quality(d)

    d["order"] = d["method"].map({m: i for i, m in enumerate(METHODS)})
    # within a method: its other knobs' values, then its family's from the largest down
    family = [METHODS[m].family if m in METHODS else None for m in d["method"]]
    d["_w"] = [
        -float(r[f]) if f is not None and pd.notna(r[f]) else 0.0
        for f, (_, r) in zip(family, d.iterrows(), strict=True)
    ]
    fields = [f for f in knobs() if f in d]
    others = [f for f in fields if not any(m.family == f for m in METHODS.values())]
    d = d.sort_values(["pair", "order", *others, "_w"], na_position="first")
    d["label"] = [
        method_label(r["method"], **{f: (None if pd.isna(r[f]) else r[f]) for f in fields})
        for _, r in d.iterrows()
    ]
    groups = d["settings_group"].fillna("")
    if (
        d.assign(g=groups).groupby(["pair", "task"])["g"].nunique().max() > 1
    ):  # settings that differ: rows apart
        d["label"] = [
            f"{label} [settings {g[:6] or 'old'}]" for label, g in zip(d["label"], groups, strict=True)
        ]

    columns: list[tuple[str, str]] = []
    for task, metric in d[["task", "metric"]].drop_duplicates().itertuples(index=False):
        columns += [(task, "acceptance_rate"), (task, metric if isinstance(metric, str) else "score")]
    rows = list(dict.fromkeys(zip(d["pair"], d["label"], strict=True)))
    table = pd.DataFrame(
        np.nan,
        index=pd.MultiIndex.from_tuples(rows, names=["pair", "method"]),
        columns=pd.MultiIndex.from_tuples(columns, names=["task", "quantity"]),
    )
    for r in d.itertuples(index=False):
        metric = r.metric if isinstance(r.metric, str) else "score"
        table.loc[(r.pair, r.label), (r.task, "acceptance_rate")] = r.acceptance_rate
        table.loc[(r.pair, r.label), (r.task, metric)] = r.score
    table.attrs.update(
        num_draft_tokens=None if num_draft_tokens is None else int(num_draft_tokens),
        temperature=float(temperature),
        best=best,
    )
    return table


def _markdown(table: pd.DataFrame, digits: int = 3) -> str:
    head = [*table.index.names, *(f"{t} {q}" for t, q in table.columns)]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * len(table.index.names) + ["---:"] * len(table.columns)) + "|",
    ]
    for idx, vals in zip(table.index, table.to_numpy(), strict=True):
        cells = [str(i) for i in idx] + ["–" if pd.isna(v) else f"{v:.{digits}f}" for v in vals]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(table: pd.DataFrame, out_dir: str | Path, name: str = "table") -> list[Path]:
    """Write a `summary_table` as `<name>.md` (with a caption line) and `<name>.csv`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n, t = table.attrs.get("num_draft_tokens"), table.attrs.get("temperature")
    best = (
        " Each knob family: its ORACLE setting (the most acceptance at autoregressive quality on these "
        "very scores; the report chooses on a validation run instead)."
        if table.attrs.get("best")
        else ""
    )
    caption = (
        f"N = {n} draft tokens, temperature {t:g}; acceptance rate (accepted / proposed drafts) and quality, "
        f"mean over seeds.{best}\n\n"
        if t is not None
        else ""
    )
    md, csv = out_dir / f"{name}.md", out_dir / f"{name}.csv"
    write_file(md, caption + _markdown(table))
    flat = table.copy()
    flat.columns = [f"{task} {q}" for task, q in table.columns]
    write_file(csv, flat.to_csv())
    return [md, csv]
