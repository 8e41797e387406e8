"""Drawing records: Pareto fronts (quality against acceptance and against time, each knob family a line)
and the summary table, as functions a notebook and `python -m diversed.plot` both call; and the look
every figure of the package shares (`figures.py` draws the report's others with it): one colour per
method (`method_colour`), the methods' display names (`methods.Method.name_only`, renamed by `labels`),
heads named by the task they were trained on (`head_names`), markers drawn so that none hides another
(`point_style`), and point labels placed where they overlap no other label and no marker
(`place_labels`).

Reads frames of records (`sweep.results.load_results`); it does not choose settings
(`analysis.fronts`), make the report's tables (`analysis.tables`) or read a head's files (the records'
`head_task` names a head's task; `plot.py` and `report.py` fill it from the heads where it is missing).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib import colormaps, style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox, ScaledTranslation

from diversed.analysis.compare import mean_over_seeds
from diversed.analysis.fronts import best_at_quality, choice_key, pareto_front
from diversed.files.atomic import write_file
from diversed.sweep.methods import METHODS, head_labels, knobs

# ----------------------------------------------------------------------------- the look

# One colour per method in every figure (Pareto, quality and time, acceptance against w): the
# built-ins' here; a method of one's own gets one of _PLUGIN_COLOURS by a hash of its name (the same in
# every process, whatever order the plugins load in; two plugins may share one).
METHOD_COLOURS = {
    "autoregressive": "#000000",
    "hf_generate": "#7f7f7f",
    "lossless": "#2ca02c",
    "finetuned_draft": "#bcbd22",
    "static": "#1f77b4",
    "hf_static": "#17becf",
    "lossy": "#9467bd",
    "cascade": "#e377c2",
    "typical": "#8c564b",
    "autoregressive_typical": "#ff7f0e",
    "dynamic": "#d62728",
}
_PLUGIN_COLOURS = tuple(to_hex(c) for c in colormaps["tab20b"].colors)
HEAD_MARKERS = ("*", "D", "P", "p", "v", "^", "<", ">")  # DIVERSED's heads, one each
LABEL_GID = "point-label"  # the gid of every label `place_labels` writes


def method_colour(method: str) -> str:
    """The colour of `method` in every figure (`METHOD_COLOURS`, else one derived from its name)."""
    if method in METHOD_COLOURS:
        return METHOD_COLOURS[method]
    digest = hashlib.sha1(str(method).encode()).digest()
    return _PLUGIN_COLOURS[int.from_bytes(digest[:4], "big") % len(_PLUGIN_COLOURS)]


def display_name(method: str, labels: Mapping[str, str] | None = None) -> str:
    """A method as legends name it: `labels[method]` (`plot --label`), else its label without its knobs
    ("Static", "DIVERSED": `Method.name_only`)."""
    if labels and method in labels:
        return labels[method]
    return METHODS[method].name_only if method in METHODS else str(method)


def head_names(d: pd.DataFrame) -> dict[str, str]:
    """Each head of `d` by the task it was trained on (`head_task`): "toy"; numbered in path order where
    two share a task ("toy #1", "toy #2"); "unknown task #1", ... where the records do not say. Never a
    path: a head's directory names a run (a timestamp), not what a reader knows."""
    if "head" not in d:
        return {}
    task_of = {str(h): None for h in d["head"].dropna()}
    if "head_task" in d:
        for h, t in zip(d["head"], d["head_task"], strict=True):
            if isinstance(h, str) and isinstance(t, str) and t:
                task_of[h] = t
    by_task: dict[str | None, list[str]] = {}
    for h in sorted(task_of):
        by_task.setdefault(task_of[h], []).append(h)
    names = {}
    for task, heads in by_task.items():
        for i, h in enumerate(heads, 1):
            names[h] = task if task and len(heads) == 1 else f"{task or 'unknown task'} #{i}"
    return names


def head_legend(name: str, labels: Mapping[str, str] | None = None) -> str:
    """DIVERSED's legend entry for the head `head_names` calls `name`: "DIVERSED, head trained on toy"."""
    return f"{display_name('dynamic', labels)}, head trained on {name}"


def head_markers(d: pd.DataFrame) -> dict[str, str]:
    """A marker per head of `d` (DIVERSED's star first), in path order."""
    heads = sorted(str(h) for h in d["head"].dropna().unique()) if "head" in d else []
    return {h: HEAD_MARKERS[i % len(HEAD_MARKERS)] for i, h in enumerate(heads)}


def point_style(method: str, marker: str | None = None) -> dict[str, object]:
    """`Axes.plot` keywords of one method's points. No marker may hide another at the same spot: the
    bigger a filled marker, the lower it is drawn (DIVERSED's, 13 pt, lowest; one-setting methods', 8 pt;
    knob families' points, 5 pt, on top), and the methods without a draft (autoregressive decoding, the
    references) are hollow and drawn above everything."""
    m = METHODS.get(method)
    colour, marker = method_colour(method), marker or (m.marker if m else "o")
    if method == "autoregressive":
        marker = "X"  # not its registry's "o": a hollow circle would read as the ring of a chosen setting
    if m is not None and not m.speculative:
        return dict(marker=marker, color=colour, mfc="none", mec=colour, mew=1.4, ms=10, zorder=7)
    if method == "dynamic":
        return dict(marker=marker, color=colour, mec="black", mew=0.6, ms=13, zorder=4)
    if m is not None and m.family is not None:
        return dict(marker=marker, color=colour, mec=colour, ms=5, zorder=6)
    return dict(marker=marker, color=colour, mec="black", mew=0.6, ms=8, zorder=5)


def has_interval(d: pd.DataFrame, low: str, high: str) -> pd.Series:
    """Rows of `d` whose interval [low, high] was measured: both ends finite and apart (autoregressive
    decoding's time against itself, [1, 1], is no interval)."""
    if low not in d or high not in d:
        return pd.Series(False, index=d.index)
    lo, hi = (pd.to_numeric(d[c], errors="coerce") for c in (low, high))
    return (lo.notna() & hi.notna() & (hi > lo)).astype(bool)


def settle(fig: Figure) -> None:
    """Lay `fig` out as it will be saved (constrained layout), so that positions on the canvas are final."""
    fig.draw_without_rendering()


APART = 0.6  # one-point markers closer than this many of the bigger one's sizes are moved apart (`dodge`)


def _clusters(spots: np.ndarray, sizes: np.ndarray) -> list[list[int]]:
    """Groups of markers linked by pairs closer than APART x the bigger one's size (pixels)."""
    group = list(range(len(spots)))
    for i in range(len(spots)):
        for j in range(i):
            if np.hypot(*(spots[i] - spots[j])) < APART * max(sizes[i], sizes[j]):
                old, new = group[i], group[j]
                group = [new if g == old else g for g in group]
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        out.setdefault(g, []).append(i)
    return list(out.values())


def _spread(pts: np.ndarray, need: float) -> np.ndarray:
    """New spots for a cluster: scaled away from its centre until its closest pair is `need` apart (the
    markers keep their order), or, where some coincide, on a circle of that chord around the centre."""
    centre = pts.mean(axis=0)
    closest = min(np.hypot(*(a - b)) for i, a in enumerate(pts) for b in pts[:i])
    if closest >= 1.0:
        return centre + (pts - centre) * max(1.0, need / closest)
    k = len(pts)
    radius = need / (2 * math.sin(math.pi / k))
    angles = math.pi / 2 + 2 * math.pi * np.arange(k) / k
    return centre + radius * np.column_stack([np.cos(angles), np.sin(angles)])


def dodge(ax) -> None:
    """Move apart the filled one-point markers that would hide one another (lossless SD and DIVERSED on
    one spot; two heads a pixel apart): closer than APART x the bigger one's size, they are spread until
    they are not, by a fraction of a marker, so that each stays visible. Family lines, faint markers and
    hollow ones (drawn on top, hiding nothing) stay where they are. Call once the layout is final."""
    singles = [
        line
        for line in ax.get_lines()
        if len(line.get_xydata()) == 1
        and not _no_marker(line)
        and str(line.get_markerfacecolor()) != "none"
        and (line.get_alpha() or 1) >= 0.5  # not the faint settings behind a front
        and np.isfinite(ax.transData.transform(line.get_xydata()[0])).all()
    ]
    if len(singles) < 2:
        return
    scale = ax.figure.dpi / 72
    spots = np.array([ax.transData.transform(line.get_xydata()[0]) for line in singles])
    sizes = np.array([line.get_markersize() * scale for line in singles])
    for group in (g for g in _clusters(spots, sizes) if len(g) > 1):
        moved = _spread(spots[group], APART * sizes[group].max())
        for i, (dx, dy) in zip(group, (moved - spots[group]) / ax.figure.dpi, strict=True):
            singles[i].set_transform(ax.transData + ScaledTranslation(dx, dy, ax.figure.dpi_scale_trans))


def finish(fig: Figure, legend, pending: Sequence[tuple[object, Sequence[PointLabel]]]) -> None:
    """Once every artist is drawn: lay the figure out, dodge coinciding markers, place each axes' point
    labels (`pending`: (axes, labels)) and name those that found no place under the legend."""
    settle(fig)
    for ax in fig.axes:
        dodge(ax)
    note_missed(fig, legend, [m for ax, labels in pending for m in place_labels(ax, labels)])


# ----------------------------------------------------------------------------- labels beside points


class PointLabel(NamedTuple):
    x: float
    y: float
    text: str  # what the label says, e.g. "0.4"
    colour: str
    what: str  # the point in words where it finds no place, e.g. "Static w=0.4"
    marker: object = None  # the one-point Line2D it labels, followed where `dodge` moved it


# Offsets tried, nearest first: 8 directions on rings of growing radius (points); beyond the second
# ring a thin leader line joins the label to its point.
_ANGLES = (45, 135, -45, -135, 90, -90, 0, 180)
_RADII = (3, 7, 12, 18, 26, 36)
_PAD = 1.5  # pixels kept clear around each label


def _no_marker(line) -> bool:
    return line.get_marker() in (None, "None", "none", "", " ")


def marker_boxes(ax) -> np.ndarray:
    """The window extent [x0, y0, x1, y1] of every marker drawn in `ax` (errorbar caps included)."""
    boxes, scale = [np.empty((0, 4))], ax.figure.dpi / 72
    for line in (line for line in ax.get_lines() if line.get_visible() and not _no_marker(line)):
        half = (line.get_markersize() + line.get_markeredgewidth()) * scale / 2
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        boxes.append(np.hstack([xy - half, xy + half]))
    return np.vstack(boxes)


def line_boxes(ax, step: float = 4.0) -> np.ndarray:
    """Small boxes every `step` pixels along each solid line of `ax` (a family's line, autoregressive
    decoding's quality), so that no label sits across one; faint lines (the fronts beneath) are left out."""
    boxes = [np.empty((0, 4))]
    for line in ax.get_lines():
        if (
            not line.get_visible()
            or line.get_linestyle() in ("None", "", " ")
            or (line.get_alpha() or 1) < 0.5
        ):
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        half = max(line.get_linewidth() * ax.figure.dpi / 144, 1.0)
        for a, b in zip(xy[:-1], xy[1:], strict=True):
            if np.isfinite([a, b]).all():
                t = np.linspace(0, 1, int(np.hypot(*(b - a)) // step) + 2)[:, None]
                pts = a + t * (b - a)
                boxes.append(np.hstack([pts - half, pts + half]))
    return np.vstack(boxes)


def _apart(box: Bbox, others: np.ndarray) -> bool:
    """Whether `box` overlaps none of `others` ([x0, y0, x1, y1] rows; touching is apart)."""
    o = others
    return not np.any((box.x0 < o[:, 2]) & (o[:, 0] < box.x1) & (box.y0 < o[:, 3]) & (o[:, 1] < box.y1))


def _box_at(px: float, py: float, w: float, h: float, angle: float) -> tuple[Bbox, str, str]:
    """The label's box with its anchor at (px, py) on the side `angle` points to, and its alignment."""
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    ha = "left" if c > 0.3 else "right" if c < -0.3 else "center"
    va = "bottom" if s > 0.3 else "top" if s < -0.3 else "center"
    x0 = {"left": px, "right": px - w, "center": px - w / 2}[ha]
    y0 = {"bottom": py, "top": py - h, "center": py - h / 2}[va]
    return Bbox([[x0 - _PAD, y0 - _PAD], [x0 + w + _PAD, y0 + h + _PAD]]), ha, va


def _spot(px, py, w, h, scale, inside: Bbox, taken: np.ndarray) -> tuple | None:
    """The nearest offset (points) from the point at (px, py) where a w x h label fits: inside the axes,
    apart from `taken`; (dx, dy, box, ha, va), or None."""
    for r in _RADII:
        for a in _ANGLES:
            dx, dy = r * math.cos(math.radians(a)), r * math.sin(math.radians(a))
            box, ha, va = _box_at(px + dx * scale, py + dy * scale, w, h, a)
            fits = inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
            if fits and _apart(box, taken):
                return dx, dy, box, ha, va
    return None


def place_labels(ax, labels: Sequence[PointLabel], fontsize: str = "x-small") -> list[PointLabel]:
    """Write each label beside its point at the nearest offset (`_ANGLES` x `_RADII`) where its box lies
    inside the axes and overlaps no label placed before, no marker and no solid line; returns those that
    found no place
    (too crowded: the caller names them elsewhere). Call once the layout is final (`settle`): the labels
    take no part in it."""
    renderer = ax.figure.canvas.get_renderer()
    inside, missed = ax.get_window_extent(renderer), []
    taken = np.vstack([marker_boxes(ax), line_boxes(ax)])
    scale = ax.figure.dpi / 72
    for label in labels:
        probe = ax.text(0, 0, label.text, fontsize=fontsize)
        w, h = probe.get_window_extent(renderer).size
        probe.remove()
        where = label.marker.get_transform() if label.marker is not None else ax.transData
        px, py = where.transform((label.x, label.y))
        spot = _spot(px, py, w, h, scale, inside, taken) if np.isfinite([px, py]).all() else None
        if spot is None:
            missed.append(label)
            continue
        dx, dy, box, ha, va = spot
        far = math.hypot(dx, dy) > _RADII[1]  # a leader line to the point
        leader = dict(arrowstyle="-", lw=0.4, color=label.colour, shrinkA=0, shrinkB=0)
        text = ax.annotate(
            label.text, (label.x, label.y), xycoords=where, xytext=(dx, dy), textcoords="offset points",
            ha=ha, va=va, fontsize=fontsize, color=label.colour, gid=LABEL_GID, annotation_clip=False,
            zorder=8, arrowprops=leader if far else None,
        )  # fmt: skip
        text.set_in_layout(False)
        taken = np.vstack([taken, box.extents])
    return missed


def note_missed(fig: Figure, legend, missed: Sequence[PointLabel]) -> None:
    """Name the points whose labels found no place, under the figure's legend (outside the axes)."""
    if not missed:
        return
    box = legend.get_window_extent(fig.canvas.get_renderer()).transformed(fig.transFigure.inverted())
    names = ", ".join(dict.fromkeys(m.what for m in missed))
    text = f"not labelled (crowded): {names}"
    note = fig.text(box.x0, box.y0, text, va="top", fontsize="x-small", wrap=True)
    note.set_in_layout(False)


# ----------------------------------------------------------------------------- Pareto figures


def method_label(
    method: str,
    weight: float | None = None,
    head: str | None = None,
    labels: dict[str, str] | None = None,
    **knobs: object,
) -> str:
    """The row label of the summary table, e.g. "Static w=0.5", "DIVERSED (llama/head)" (a path by its
    label in `labels` where it has one: `methods.head_labels`)."""
    if method not in METHODS:
        return str(method)
    return METHODS[method].describe({"weight": weight, "head": head, **knobs}, labels)


def safe_name(name: object) -> str:
    """`name` as part of a file name: runs of other characters than letters, digits and ._=- become -."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", str(name)).strip("-")


def _most_rows(values: pd.Series) -> object:
    """The value with the most rows, the smallest one on ties; None if there is none."""
    counts = values.dropna().value_counts()
    if counts.empty:
        return None
    return min(counts.index[counts == counts.max()])


def _speculative(method: object) -> bool:
    return METHODS[method].speculative if method in METHODS else True


def _singles() -> list[str]:
    """The speculative methods drawn as one marker per setting: those without a knob family, but DIVERSED."""
    return [name for name, m in METHODS.items() if m.speculative and m.family is None and name != "dynamic"]


def _references() -> list[str]:
    """The methods without a draft drawn as markers in the time panel: all but autoregressive decoding
    and those with a knob family (drawn as lines)."""
    return [
        name
        for name, m in METHODS.items()
        if not m.speculative and m.family is None and name != "autoregressive"
    ]


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


def _line_key(name: str, others: Mapping[str, object]) -> tuple:
    return name, tuple(sorted((k, str(v)) for k, v in others.items()))


def _line_styles(d: pd.DataFrame) -> dict[tuple, object]:
    """A dash pattern per family line of `d`: the method's own (`Method.line`) for its first line, others
    for lines of the same method with other knob values (a cascade's rules), which share its colour."""
    styles, spare = {}, ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (1, 2)))
    for name, others, _ in _lines(d):
        used = [s for (n, _), s in styles.items() if n == name]
        pool = [METHODS[name].line, *(s for s in spare if s != METHODS[name].line)]
        styles.setdefault(_line_key(name, others), pool[len(used) % len(pool)])
    return styles


def _line_label(name: str, others: dict[str, object], labels: Mapping[str, str] | None = None) -> str:
    """ "Cascade rule=chow, α labelled": the method's display name, its other knobs' values, the symbol of
    the knob beside the points."""
    m = METHODS[name]
    values = " ".join(f"{m.knob(k).symbol}={m.knob(k).show(v)}" for k, v in others.items())
    return f"{display_name(name, labels)}{' ' + values if values else ''}, {m.knob(m.family).symbol} labelled"


def _draw_reference(ax, d: pd.DataFrame, y: str) -> None:
    """Autoregressive decoding (its quality as a vertical line where it has no `y`, as acceptance; else a
    hollow marker at time 1) and the other methods without a draft, as hollow markers where they have `y`."""
    for _, r in d[d["method"] == "autoregressive"].iterrows():
        if y == "acceptance_rate" or pd.isna(r[y]):
            ax.axvline(r["score"], color=method_colour("autoregressive"), ls="--", lw=1.2, zorder=1)
        else:
            ax.plot(r["score"], r[y], ls="", **point_style("autoregressive"))
    for _, r in d[d["method"].isin(_references()) & d[y].notna()].iterrows():
        ax.plot(r["score"], r[y], ls="", **point_style(r["method"]))


def _draw_line(
    ax, line: pd.DataFrame, name: str, y: str, ls: object, minimize: bool, chosen: Mapping
) -> list:
    """One family line over its knob, its Pareto front thick beneath, the `chosen` setting ringed; returns
    its points' labels (the knob's value)."""
    m, colour = METHODS[name], method_colour(name)
    ax.plot(line["score"], line[y], ls=ls, lw=1.1, alpha=0.9, **point_style(name))
    front = pareto_front(line, "score", y, maximize=(True, not minimize))
    ax.plot(front["score"], front[y], "-", color=colour, lw=5, alpha=0.2, solid_capstyle="round", zorder=2)
    labels = []
    for _, r in line.iterrows():
        value = chosen.get(choice_key(r))
        if value is not None and np.isclose(float(r[m.family]), float(value)):
            ax.plot(r["score"], r[y], "o", mfc="none", mec=colour, mew=1.8, ms=15, zorder=7)
        shown = m.knob(m.family).show(r[m.family])
        labels.append(
            PointLabel(r["score"], r[y], shown, colour, f"{m.name_only} {m.knob(m.family).symbol}={shown}")
        )
    return labels


def _draw_panel(
    ax, d: pd.DataFrame, n: int | None, y: str, heads: Mapping[str, str], *, minimize: bool, chosen: Mapping
) -> list[PointLabel]:
    """One panel: quality (x) against `y` for the draft length `n` of one (pair, task, temperature), the
    methods without a draft beside; each knob family a line (`_draw_line`), the other methods markers in
    their colours, faint horizontal bars the quality's 95 % interval where the records hold one. Returns
    the labels to place once the figure is laid out."""
    spec = d[(d["num_draft_tokens"] == n) & d[y].notna()] if n is not None else d.iloc[0:0]
    free = d[~d["method"].map(_speculative)]
    if y == "normalized_time":
        ax.axhline(1.0, color="0.7", ls=":", lw=1, zorder=0)
    _draw_reference(ax, free, y)
    styles, labels = _line_styles(d), []
    for name, others, line in _lines(pd.concat([spec, free[free[y].notna()]])):
        labels += _draw_line(ax, line, name, y, styles[_line_key(name, others)], minimize, chosen)
    for _, r in spec[spec["method"].isin(_singles())].iterrows():
        ax.plot(r["score"], r[y], ls="", **point_style(r["method"]))
    for _, r in spec[spec["method"] == "dynamic"].iterrows():
        ax.plot(r["score"], r[y], ls="", **point_style("dynamic", heads.get(str(r["head"]))))

    drawn = pd.concat([spec, free[free[y].notna()]])
    pts = drawn[has_interval(drawn, "score_ci_low", "score_ci_high")]
    if len(pts):  # faint, so that it does not hide the curves
        err = np.vstack([pts["score"] - pts["score_ci_low"], pts["score_ci_high"] - pts["score"]]).clip(min=0)
        ax.errorbar(
            pts["score"], pts[y], xerr=err, fmt="none", ecolor="0.6", elinewidth=0.6, alpha=0.5, zorder=1
        )
    if not d[y].notna().any():
        ax.text(0.5, 0.5, f"no {y} in these records", transform=ax.transAxes, ha="center", color="0.4")
    ax.grid(alpha=0.3)
    return labels


def _handle(marker: str, color: str, label: str, **kw) -> Line2D:
    return Line2D([], [], marker=marker, color=color, label=label, **kw)


def _legend(
    d: pd.DataFrame, heads: Mapping[str, str], chosen: bool = False, labels: Mapping[str, str] | None = None
) -> list[Line2D]:
    """Legend entries of the methods in `d`, each in its colour and marker: a family's line names the knob
    beside its points, DIVERSED's heads the task each was trained on."""
    methods, styles, out = set(d["method"]), _line_styles(d), []
    names = head_names(d)
    for name, others, _ in _lines(d):
        style_ = {k: v for k, v in point_style(name).items() if k not in ("zorder", "marker", "color")}
        label = _line_label(name, others, labels)
        out.append(
            _handle(
                METHODS[name].marker,
                method_colour(name),
                label,
                lw=1.1,
                ls=styles[_line_key(name, others)],
                **style_,
            )
        )
    if out:
        out.append(_handle("", "0.3", "each line's Pareto front", lw=5, alpha=0.2))
    if out and chosen:
        out.append(_handle("o", "0.3", "the setting chosen on validation", ls="", mfc="none", mew=1.8, ms=11))
    for name in [*_singles(), *_references()]:
        if name in methods:
            out.append(
                _handle(
                    ls="",
                    label=display_name(name, labels),
                    **{k: v for k, v in point_style(name).items() if k != "zorder"},
                )
            )
    for h, marker in heads.items():
        style_ = {k: v for k, v in point_style("dynamic", marker).items() if k not in ("zorder", "ms")}
        out.append(_handle(ls="", ms=11, label=head_legend(names.get(h, h), labels), **style_))
    if "autoregressive" in methods:
        style_ = {k: v for k, v in point_style("autoregressive").items() if k not in ("zorder", "ms")}
        out += [
            _handle(ls="", ms=9, label=display_name("autoregressive", labels), **style_),
            _handle(
                "",
                method_colour("autoregressive"),
                f"{display_name('autoregressive', labels)}: quality",
                ls="--",
                lw=1.2,
            ),
        ]
    return out


def pareto_figure(
    g: pd.DataFrame,
    *,
    title: str = "",
    chosen: Mapping | None = None,
    figsize: tuple[float, float] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """One (pair, task, temperature)'s seed-averaged records: a row of two panels per draft length N,
    quality against acceptance (left) and against time relative to autoregressive decoding (right).
    `figsize` is (width, height of one row) in inches; `labels` renames methods in the legend."""
    ns = sorted(int(n) for n in g["num_draft_tokens"].dropna().unique()) or [None]
    width, height = figsize or (12.5, 4.8)
    fig = Figure(figsize=(width, height * len(ns)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(ns), 2, sharex=True, squeeze=False)
    heads = head_markers(g[g["method"] == "dynamic"])
    metric = g["metric"].dropna().iloc[0] if g["metric"].notna().any() else "score"
    task = g["task"].iloc[0]
    pending = []
    for row, (n, (ax_acc, ax_time)) in enumerate(zip(ns, axes, strict=True)):
        pending.append(
            (ax_acc, _draw_panel(ax_acc, g, n, "acceptance_rate", heads, minimize=False, chosen=chosen or {}))
        )
        pending.append(
            (
                ax_time,
                _draw_panel(ax_time, g, n, "normalized_time", heads, minimize=True, chosen=chosen or {}),
            )
        )
        where = f"N = {n} draft tokens" if n is not None else "no draft"
        ax_acc.set(title=where, ylabel="acceptance: accepted / proposed drafts\n(higher is better)")
        ax_time.set(title=where, ylabel="time / autoregressive time\n(lower is better)")
        if row == len(ns) - 1:
            for ax in (ax_acc, ax_time):
                ax.set_xlabel(f"{task} {metric} (higher is better)")
    fig.suptitle(title, x=0.01, ha="left")  # clear of the legend at the upper right
    legend = fig.legend(
        handles=_legend(g, heads, bool(chosen), labels),
        loc="outside right upper",
        fontsize="small",
        frameon=False,
    )
    finish(fig, legend, pending)
    return fig


def plot_pareto(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    formats: Sequence[str] = ("png", "pdf"),
    choices: pd.DataFrame | None = None,
    figsize: tuple[float, float] | None = None,
    style_name: str | None = None,
    methods: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write one figure per (pair, task, temperature) in each of `formats` (`pareto_figure`); returns the
    paths. Each knob family is drawn as its whole line with its front; with `choices` (`fronts.choose_on`
    on a validation run) the setting chosen for each line is ringed. `style_name`: a matplotlib style
    the figures are drawn in; `methods`: only these are drawn; `labels`: methods renamed in legends.

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
    if methods is not None:
        d = d[d["method"].isin(list(methods))]
    d["settings_group"] = d["settings_group"].fillna("")
    paths: list[Path] = []
    groups = d.groupby(["pair", "task", "temperature"])["settings_group"].nunique()
    with style.context(style_name) if style_name else nullcontext():
        for (pair, task, temp, settings), g in d.groupby(
            ["pair", "task", "temperature", "settings_group"], sort=True
        ):
            several = groups[(pair, task, temp)] > 1  # settings that differ: one figure each, named apart
            mode = "greedy" if temp == 0 else "sampling"
            title = f"{pair} · {task} · temperature {temp:g} ({mode})" + (
                f" · settings {settings[:6] or 'old'}" if several else ""
            )
            fig = pareto_figure(g, title=title, chosen=chosen, figsize=figsize, labels=labels)
            stem = f"pareto_{safe_name(pair)}_{safe_name(task)}_T{temp:g}" + (
                f"_s{settings[:6] or 'old'}" if several else ""
            )
            paths += save_figure(fig, out_dir, stem, formats)
    return paths


def save_figure(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str]) -> list[Path]:
    """`fig` as `<out_dir>/<stem>.<format>` for each format, each file written whole (`atomic.write_file`)."""
    return [
        write_file(out_dir / f"{stem}.{fmt}", lambda f, fmt=fmt: fig.savefig(f, format=fmt, dpi=150))
        for fmt in formats
    ]


# ----------------------------------------------------------------------------- the summary table


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
    d = _labelled(d)

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


def _labelled(d: pd.DataFrame) -> pd.DataFrame:
    """Seed-averaged rows in the table's order with their `label`: the registry's order of methods,
    within a method its other knobs' values, then its family's from the largest down; settings that
    differ within a pair and task labelled apart."""
    d["order"] = d["method"].map({m: i for i, m in enumerate(METHODS)})
    family = [METHODS[m].family if m in METHODS else None for m in d["method"]]
    d["_w"] = [
        -float(r[f]) if f is not None and pd.notna(r[f]) else 0.0
        for f, (_, r) in zip(family, d.iterrows(), strict=True)
    ]
    fields = [f for f in knobs() if f in d]
    others = [f for f in fields if not any(m.family == f for m in METHODS.values())]
    d = d.sort_values(["pair", "order", *others, "_w"], na_position="first")
    labels: dict[str, str] = {}  # every head and draft path by a label no other path of the table has
    for f in dict.fromkeys(k.field for m in METHODS.values() for k in m.knobs if k.path):
        if f in d:
            labels.update(head_labels(d[f].dropna()))
    d["label"] = [
        method_label(r["method"], labels=labels, **{f: (None if pd.isna(r[f]) else r[f]) for f in fields})
        for _, r in d.iterrows()
    ]
    groups = d["settings_group"].fillna("")
    if (
        d.assign(g=groups).groupby(["pair", "task"])["g"].nunique().max() > 1
    ):  # settings that differ: rows apart
        d["label"] = [
            f"{label} [settings {g[:6] or 'old'}]" for label, g in zip(d["label"], groups, strict=True)
        ]
    return d


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
