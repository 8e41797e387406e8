"""The report's figures beyond the Pareto plots of `plot.py`: acceptance against w with
Proposition 1 beside it, quality against time per sample and per token, time against acceptance,
and what a head learned.

Each function takes seed-averaged records (`compare.mean_over_seeds`; the time figures draw the
intervals of `times.times_over_seeds` where the records have them, and no bar where they have none,
their captions saying which) or a dynamic point's example rows, writes PNG and PDF (HTML for coloured
completions) under `out_dir` and returns a list of `Shown(paths, caption)` for the report to index.
They share the Pareto figures' look (`drawing.py`: one colour per method, display names, heads named
by their task, markers that hide none, labels that overlap nothing), with each legend outside its
axes. It draws only what the records hold: nothing is decoded or rescored. Figures are made on the Agg
canvas without pyplot (the backend is left alone).
"""

from __future__ import annotations

import hashlib
import html
import keyword
import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from diversed.analysis.drawing import (
    PointLabel,
    display_name,
    finish,
    has_interval,
    head_legend,
    head_markers,
    head_names,
    method_colour,
    point_style,
    safe_name,
    save_figure,
)
from diversed.analysis.fronts import pareto_front
from diversed.files.atomic import write_file
from diversed.sweep.methods import METHODS
from diversed.sweep.times import PER_TOKEN, ci_fields, shown_time


class Shown(NamedTuple):
    paths: list[Path]
    caption: str
    tasks: tuple[str, ...] = ()  # the tasks whose records it draws


_LEGEND_WIDTH = 3.2  # inches beside the axes for a legend outside them (`_legend`)


def _figure(n_axes: int = 1, width: float = 6.0, rows: int = 1, legend: bool = True) -> tuple[Figure, list]:
    """A figure of `rows` x `n_axes` panels `width` inches wide, and room for a legend on the right."""
    fig = Figure(figsize=(width * n_axes + _LEGEND_WIDTH * legend, 4.4 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, n_axes, squeeze=False)
    return fig, list(axes.ravel())


def _save(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str]) -> list[Path]:
    """`fig` as `<out_dir>/<stem>.<format>` for each format (`drawing.save_figure`)."""
    return save_figure(fig, out_dir, stem, formats)


def _legend(fig: Figure, axes: Sequence) -> object:
    """One legend for the figure, outside its axes on the right: each label once, in drawing order."""
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    return fig.legend(
        handles.values(), handles.keys(), loc="outside right upper", fontsize="small", frameon=False
    )


class Series(NamedTuple):
    method: str
    label: str  # its legend entry
    rows: pd.DataFrame
    marker: str | None  # a head's marker; None: the method's own


def _series(d: pd.DataFrame) -> list[Series]:
    """The records of `d` by what a legend names: a method, DIVERSED by head (named by its task)."""
    out, names, markers = [], head_names(d), head_markers(d[d["method"] == "dynamic"])
    for method, m in d.groupby("method", sort=False):
        if method != "dynamic":
            out.append(Series(method, display_name(method), m, None))
            continue
        for head, h in m.groupby(m["head"].astype(str), sort=True):
            out.append(Series(method, head_legend(names.get(head, head)), h, markers.get(head)))
    order = {name: i for i, name in enumerate(METHODS)}  # the registry's order, in every legend
    return sorted(out, key=lambda s: (order.get(s.method, len(order)), s.label))


def _bars(ax, m: pd.DataFrame, x: str, y: str, err_of: str, colour: str, zorder: float) -> bool:
    """Error bars on `err_of` (x or y) for the rows of `m` whose interval was measured (`times.ci_fields`),
    none on the others; returns whether any was drawn."""
    low, high = ci_fields(err_of)
    rows = m[has_interval(m, low, high)]
    if rows.empty:
        return False
    err = np.vstack([rows[err_of] - rows[low], rows[high] - rows[err_of]]).astype(float).clip(min=0)
    kw = {"xerr": err} if err_of == x else {"yerr": err}
    ax.errorbar(rows[x], rows[y], fmt="none", ecolor=colour, elinewidth=0.8, capsize=2, zorder=zorder, **kw)
    return True


def _points(ax, rows: pd.DataFrame, x: str, y: str, label: str, style: dict) -> list:
    """One marker per row (so that `drawing.dodge` can move apart those on one spot), in the legend once;
    returns them, in the rows' order."""
    return [
        ax.plot([px], [py], ls="", label=label if i == 0 else "_", **style)[0]
        for i, (px, py) in enumerate(zip(rows[x], rows[y], strict=True))
    ]


def bars_caption(drawn: bool, d: pd.DataFrame, what: str = "the times") -> str:
    """What the bars of a time figure are, or why there are none."""
    if drawn:
        return (
            f"bars: 95 % intervals of {what} (over seeds, or one seed's timing repeats), drawn where the "
            "records hold one"
        )
    seeds = int(pd.to_numeric(d.get("n_seeds", pd.Series([1])), errors="coerce").max() or 1)
    why = (
        "one seed timed without repeats, timing.repeats=0: each time is a single measurement; set "
        "timing.repeats or run more seeds for intervals"
        if seeds <= 1
        else "these records hold none"
    )
    return f"no error bars: no interval of {what} was measured ({why})"


# ----------------------------------------------------------------------------- acceptance against w


def prop1_gaps(d: pd.DataFrame) -> pd.DataFrame:
    """Static-ensemble rows with Proposition 1's prediction α̂ = 1 − w·mean_tv, the gap α − α̂ and
    that gap in binomial standard errors of α (over `verified_drafts`; drafts of one sequence are
    correlated, so the true error is somewhat larger). Sampled decoding only (greedy has no mean_tv)."""
    s = d[(d["method"] == "static") & d["mean_tv"].notna() & d["alpha"].notna()].copy()
    s["predicted"] = 1.0 - s["weight"] * s["mean_tv"]
    s["gap"] = s["alpha"] - s["predicted"]
    n = s["verified_drafts"] if "verified_drafts" in s else pd.Series(np.nan, s.index)
    se = np.sqrt((s["alpha"] * (1 - s["alpha"])).clip(lower=1e-12) / n.astype(float))
    s["gap_se"] = s["gap"].abs() / se
    return s


_N_MARKERS = ("o", "s", "^", "D", "v", "P")  # the draft lengths of one figure, where colour is the method's


def _acceptance_lines(ax, g: pd.DataFrame, static: pd.DataFrame, gaps: pd.DataFrame, y: str) -> None:
    """The static ensemble's α against w per N (its colour, a marker per N), Proposition 1's prediction
    dashed with hollow markers, and each head's α at its mean w (DIVERSED's colour, the head's marker)."""
    names, markers = head_names(g), head_markers(g[g["method"] == "dynamic"])
    colour, several = method_colour("static"), static["num_draft_tokens"].nunique() > 1
    for i, (n, s) in enumerate(static.sort_values("weight").groupby("num_draft_tokens")):
        at = f" (N={int(n)})" if several else ""
        marker = _N_MARKERS[i % len(_N_MARKERS)]
        ax.plot(
            s["weight"],
            s[y],
            marker=marker,
            ls="-",
            color=colour,
            label=f"{display_name('static')}, measured{at}",
        )
        p = gaps[gaps["num_draft_tokens"] == n].sort_values("weight")
        if len(p):
            ax.plot(
                p["weight"], p["predicted"], marker=marker, mfc="none", ls="--", color=colour, alpha=0.8,
                label=f"Proposition 1: 1 − w·mean TV{at}",
            )  # fmt: skip
        dyn = g[(g["method"] == "dynamic") & (g["num_draft_tokens"] == n)]
        for head, h in dyn.groupby(dyn["head"].astype(str), sort=True):
            style = point_style("dynamic", markers.get(head))
            label = f"{head_legend(names.get(head, head))}, at its mean w{at}"
            ax.plot(h["mean_w"], h[y], ls="", label=label, **style)


def acceptance_vs_w(
    d: pd.DataFrame, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf")
) -> list[Shown]:
    """Per (pair, task, temperature): the static ensemble's acceptance α (accepted over verified
    drafts) against w, a marker per N, Proposition 1's 1 − w·mean_tv dashed beside it (sampled
    decoding), and each head's α at its mean w."""
    shown = []
    for (pair, task, temp), g in d.groupby(["pair", "task", "temperature"], sort=True):
        static = g[g["method"] == "static"]
        if static.empty:
            continue
        fig, (ax,) = _figure()
        y = "alpha" if static["alpha"].notna().any() else "acceptance_rate"
        gaps = prop1_gaps(g)
        _acceptance_lines(ax, g, static, gaps, y)
        ns = ", ".join(str(int(n)) for n in sorted(static["num_draft_tokens"].dropna().unique()))
        ax.set(
            xlabel="w, the weight on the target",
            ylabel="acceptance α (accepted / verified drafts)"
            if y == "alpha"
            else "acceptance (accepted / proposed drafts)",
            xlim=(-0.03, 1.03),
            title=f"{pair} · {task} · T={temp:g} · N={ns}",
        )
        ax.grid(alpha=0.3)
        finish(fig, _legend(fig, [ax]), [])
        if len(gaps):
            worst = gaps.loc[gaps["gap"].abs().idxmax()]
            se = (
                ""
                if math.isnan(worst["gap_se"])
                else f", {worst['gap_se']:.1f} binomial standard errors of α"
            )
            caption = (
                f"Acceptance α = accepted/verified drafts against w, {pair} · {task} · T={temp:g} "
                "(the tables' accepted/proposed is lower: drafts after a rejection count there). "
                "Proposition 1 predicts α = 1 − w·mean TV(p, q) "
                f"in sampled decoding; the largest gap over {len(gaps)} points is {worst['gap']:+.4f} (N="
                f"{int(worst['num_draft_tokens'])}, w={worst['weight']:g}{se}). No error bars."
            )
        else:
            name = "α = accepted/verified drafts" if y == "alpha" else "accepted/proposed drafts"
            caption = (
                f"Acceptance ({name}) against w, {pair} · {task} · T={temp:g} (no Proposition 1 prediction: "
                "no mean TV, greedy decoding). No error bars."
            )
        shown.append(
            Shown(
                _save(
                    fig,
                    Path(out_dir),
                    f"acceptance_vs_w_{safe_name(pair)}_{safe_name(task)}_T{temp:g}",
                    formats,
                ),
                caption,
                (task,),
            )
        )
    return shown


# ----------------------------------------------------------------------------- time


def _time_axes(d: pd.DataFrame) -> list[tuple[str, str]]:
    """The time per sample and per token, relative to autoregressive decoding: from the latency
    pass (each example alone at batch 1, the paper's time) where there is one, else the timed
    passes at the sweep's batch size."""
    field = shown_time(d)
    mode = "batch 1" if field == "normalized_latency" else "batched"
    return [
        (field, f"time per sample / autoregressive ({mode})"),
        (PER_TOKEN[field], f"time per token / autoregressive ({mode})"),
    ]


def _time_panel(ax, h: pd.DataFrame, x: str, several_n: bool) -> tuple[bool, list[PointLabel]]:
    """One quality-against-time panel: each knob family as its faint points and its Pareto front (quality
    up, time down), the other methods as points; bars where an interval was measured. Returns whether a
    bar was drawn, and the points' N labels where the figure has several N."""
    drawn, labels = False, []
    for s in _series(h):
        style, colour = point_style(s.method, s.marker), method_colour(s.method)
        if METHODS.get(s.method) and METHODS[s.method].family:
            front = pareto_front(s.rows, x, "score", maximize=(False, True))
            ax.plot(s.rows[x], s.rows["score"], ls="", alpha=0.3, **style)
            ax.plot(front[x], front["score"], ls="-", lw=1.2, label=f"{s.label} (front)", **style)
            drawn |= _bars(ax, s.rows, x, "score", x, colour, style["zorder"] - 0.5)
            continue
        markers = _points(ax, s.rows, x, "score", s.label, style)
        drawn |= _bars(ax, s.rows, x, "score", x, colour, style["zorder"] - 0.5)
        for marker, (_, r) in zip(markers, s.rows.iterrows(), strict=True):
            if several_n and pd.notna(r["num_draft_tokens"]):
                n = int(r["num_draft_tokens"])
                labels.append(PointLabel(r[x], r["score"], f"N={n}", colour, f"{s.label} N={n}", marker))
    return drawn, labels


def quality_vs_time(
    d: pd.DataFrame, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf")
) -> list[Shown]:
    """Per (task, temperature), a row per pair: quality against time per sample (left) and per
    generated token (right, as lossy settings change lengths), both relative to autoregressive
    decoding, with each time's 95 % interval as a horizontal bar where one was measured; the knob
    families as their Pareto fronts (quality up, time down), the other methods as points (N beside
    where the figure has several)."""
    shown = []
    for (task, temp), g in d.groupby(["task", "temperature"], sort=True):
        axes_spec = _time_axes(g)
        pairs = sorted(g["pair"].unique())
        ns = sorted(int(n) for n in g["num_draft_tokens"].dropna().unique())
        fig, axes = _figure(2, 5.0, rows=len(pairs))
        pending, drawn = [], False
        for row, pair in enumerate(pairs):
            for ax, (x, xlabel) in zip(axes[2 * row : 2 * row + 2], axes_spec, strict=True):
                h = g[(g["pair"] == pair) & g[x].notna()] if x in g else g.iloc[0:0]
                bars, labels = _time_panel(ax, h, x, len(ns) > 1)
                drawn |= bars
                pending.append((ax, labels))
                at = f" · N={ns[0]}" if len(ns) == 1 else ""
                ax.set(
                    xlabel=xlabel,
                    ylabel=f"{task} {g['metric'].iloc[0]}",
                    title=f"{pair} · T={temp:g}{at} · {xlabel.split(' /')[0]}",
                )
                ax.grid(alpha=0.3)
                if h.empty:  # e.g. records from before per-token latencies
                    ax.text(
                        0.5,
                        0.5,
                        "no such times in these records",
                        ha="center",
                        va="center",
                        transform=ax.transAxes,
                    )
        finish(fig, _legend(fig, axes), pending)
        mode = axes_spec[0][1].split("(")[-1].rstrip(")")
        caption = (
            f"Quality against time per sample (left) and per token (right), {task} · T={temp:g}, per pair: "
            f"relative to autoregressive decoding ({mode}; every method on the same forward path); "
            f"{bars_caption(drawn, g)}."
        )
        shown.append(
            Shown(
                _save(fig, Path(out_dir), f"quality_vs_time_{safe_name(task)}_T{temp:g}", formats),
                caption,
                (task,),
            )
        )
    return shown


def time_vs_acceptance(
    d: pd.DataFrame, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf")
) -> list[Shown]:
    """Per (task, temperature), one panel per pair: time relative to autoregressive decoding (its 95 %
    interval as a bar where one was measured) against the acceptance rate, every speculative point in
    its method's colour; below 1 is a speed-up."""
    shown = []
    for (task, temp), g in d.groupby(["task", "temperature"], sort=True):
        y = shown_time(g)
        pairs = sorted(g["pair"].unique())
        ns = ", ".join(str(int(n)) for n in sorted(g["num_draft_tokens"].dropna().unique()))
        fig, axes = _figure(len(pairs), 5.0)
        drawn = False
        for ax, pair in zip(axes, pairs, strict=True):
            h = g[(g["pair"] == pair) & g["acceptance_rate"].notna() & g[y].notna()]
            ax.axhline(1.0, color=method_colour("autoregressive"), lw=0.8, ls=":", label="Autoregressive")
            for s in _series(h):
                style = point_style(s.method, s.marker)
                _points(ax, s.rows, "acceptance_rate", y, s.label, style)
                drawn |= _bars(
                    ax, s.rows, "acceptance_rate", y, y, method_colour(s.method), style["zorder"] - 0.5
                )
            ax.set(
                xlabel="acceptance (accepted / proposed drafts)",
                ylabel=(
                    "time / autoregressive "
                    f"({'per sample, batch 1' if y == 'normalized_latency' else 'batch'})"
                ),
                title=f"{pair} · {task} · T={temp:g} · N={ns}",
            )
            ax.grid(alpha=0.3)
        finish(fig, _legend(fig, axes), [])
        caption = (
            f"Time against acceptance, {task} · T={temp:g}: relative to autoregressive decoding on the same "
            f"forward path (the paper min-max normalises its axis); {bars_caption(drawn, g)}."
        )
        shown.append(
            Shown(
                _save(fig, Path(out_dir), f"time_vs_acceptance_{safe_name(task)}_T{temp:g}", formats),
                caption,
                (task,),
            )
        )
    return shown


# ----------------------------------------------------------------------------- what the head learned

TOKEN_CLASSES = ("digits", "words", "punctuation", "code", "whitespace", "other")
_PROSE = set(".,;:!?'\"-—–…")
_CODE = set("()[]{}=<>+*/%#_\\|&^~`@")


def token_class(text: str) -> str:
    """digits ("42"), words ("the", " Paris"), punctuation (prose marks), code (Python keywords,
    brackets and operators, snake_case), whitespace, or other."""
    t = text.strip()
    if not t:
        return "whitespace"
    if t.replace(".", "").replace(",", "").isdigit():
        return "digits"
    if keyword.iskeyword(t) or set(t) & _CODE:
        return "code"
    if all(c in _PROSE for c in t):
        return "punctuation"
    if t.replace("'", "").isalpha():
        return "words"
    return "other"


def _w_colour(w: float) -> str:
    return to_hex(colormaps["coolwarm"](float(w)))  # blue: the draft's (w = 0), red: the target's (w = 1)


def head_learned(
    record: dict,
    rows: Sequence[dict],
    out_dir: str | Path,
    *,
    n_examples: int = 5,
    formats: Sequence[str] = ("png", "pdf"),
    seeds: int = 1,
    tag: str = "",
) -> list[Shown]:
    """One dynamic point's completions with each token coloured by the head's w (HTML), and the
    mean w by token class (bars, the count above each), over `rows`: the point's per-example rows of
    its `seeds` seeds pooled (one figure per point, not per seed; each row's `seed`, where it has one,
    heads its completion); `tag` (a settings group's) names a point decoded under several settings.
    Needs rows written with sweep.token_w."""
    rows = [r for r in rows if r.get("token_w") and r.get("token_text")]
    if not rows:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trained = record.get("head_task") or "unknown"
    name = (
        f"{safe_name(record['pair'])}_{safe_name(record['task'])}_T{record['temperature']:g}_N{int(record['num_draft_tokens'])}"
        f"_head-{safe_name(trained)}-{hashlib.sha1(str(record['head']).encode()).hexdigest()[:6]}"
        + (f"_settings-{safe_name(tag)}" if tag else "")
    )
    title = (
        f"{record['pair']} · {record['task']} · T={record['temperature']:g} · "
        f"N={int(record['num_draft_tokens'])} · head trained on {trained}"
        + (f" · settings {tag}" if tag else "")
    )
    page = out_dir / f"head_learned_{name}.html"
    write_file(page, _coloured_completions(title, rows[:n_examples]))
    frame = pd.DataFrame(
        [(token_class(t), w) for r in rows for t, w in zip(r["token_text"], r["token_w"], strict=True)],
        columns=["cls", "w"],
    )
    fig, w, (lo, hi), at_bounds = _w_by_token_class(frame, title, record.get("w_bounds"))
    caption = (
        f"What the head learned, {title}: mean w by token class over {len(frame)} tokens of {len(rows)} "
        + (f"completions ({seeds} seeds pooled) " if seeds > 1 else "completions ")
        + "(bars: ± one standard deviation over the class's tokens), "
        f"and the distribution of w over those tokens (median {np.median(w):.2f}, IQR "
        f"[{np.quantile(w, 0.25):.2f}, {np.quantile(w, 0.75):.2f}], min {w.min():.2f}, "
        f"{100 * at_bounds:.0f} % within 0.01 of the extremes {lo:.2f} / {hi:.2f}); coloured completions in "
        f"{page.name}."
    )
    return [
        Shown([page, *_save(fig, out_dir, f"w_by_token_class_{name}", formats)], caption, (record["task"],))
    ]


def _coloured_completions(title: str, rows: Sequence[dict]) -> str:
    """An HTML page of `rows`' completions, each token's background the head's w there."""
    spans = []
    for r in rows:
        toks = "".join(
            f'<span style="background:{_w_colour(w)}" title="w={w:.2f}">{html.escape(t)}</span>'
            for t, w in zip(r["token_text"], r["token_w"], strict=True)
        )
        said = f"score {r.get('score')}" + (f", seed {r['seed']}" if r.get("seed") is not None else "")
        spans.append(f"<h3>{html.escape(str(r.get('example_id')))} ({said})</h3><pre>{toks}</pre>")
    legend = "".join(
        f'<span style="background:{_w_colour(w)}">&nbsp;w={w:.1f}&nbsp;</span>' for w in np.linspace(0, 1, 6)
    )
    return (
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title><h2>{html.escape(title)}</h2>"
        f"<p>Each token's background is the head's w (the weight on the target): {legend}</p>"
        f"{''.join(spans)}\n"
    )


def _w_by_token_class(frame: pd.DataFrame, title: str, w_bounds):
    """The figure of w over emitted tokens (`frame`: cls, w): mean w by token class (bars), and its
    distribution (histogram). Returns (the figure, the w values, the bounds (the head's `w_bounds`
    where recorded, else the values' range), the share of tokens within 0.01 of them)."""
    stats = (
        frame.groupby("cls")["w"]
        .agg(["mean", "count", "std"])
        .reindex([c for c in TOKEN_CLASSES if c in set(frame["cls"])])
    )
    fig, (ax, hist) = _figure(2, 6.0, legend=False)
    # the class and its count on two short lines (a wide count ran into its neighbours' labels)
    names = [f"{c}\nn = {int(n):,}" for c, n in zip(stats.index, stats["count"], strict=True)]
    ax.bar(
        names,
        stats["mean"],
        yerr=stats["std"].fillna(0.0),
        color=[_w_colour(w) for w in stats["mean"]],
        capsize=3,
    )
    ax.set(ylim=(0, 1.05), ylabel="mean w over emitted tokens (± sd)", title=title, xlabel="token class")
    ax.tick_params(axis="x", labelsize=8)
    ax.title.set_fontsize(8)
    # the distribution of w over tokens: a head that learned a context-dependent weight spreads it; one
    # that saturated sits at its bounds (the head's w_bounds where recorded, else 0 and 1)
    w = frame["w"].to_numpy(dtype=float)
    lo, hi = (float(b) for b in (w_bounds or (w.min(), w.max())))
    at_bounds = float(np.mean((w <= lo + 0.01) | (w >= hi - 0.01)))
    hist.hist(w, bins=np.linspace(0, 1, 41), color="0.4")
    hist.set(
        xlim=(0, 1),
        xlabel="w (the weight on the target) at each emitted token",
        ylabel="tokens",
        title=f"w over {len(w)} tokens: median {np.median(w):.2f}, IQR "
        f"[{np.quantile(w, 0.25):.2f}, {np.quantile(w, 0.75):.2f}], {100 * at_bounds:.0f} % within 0.01 of "
        f"[{lo:.2f}, {hi:.2f}]",
    )
    hist.title.set_fontsize(8)
    return fig, w, (lo, hi), at_bounds
