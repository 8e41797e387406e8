"""Figures fit for a paper, on tiny synthetic records: legends name what a reader knows (heads by their
task, never a path or timestamp; N as an integer), one colour per method in every figure, labels that
overlap nothing, markers that hide none, error bars only where an interval was measured (and captions
that say so), and `python -m diversed.plot`'s options checked before anything is read."""

from __future__ import annotations

import json
import re
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.text import Text

from diversed.analysis import figures
from diversed.analysis.compare import mean_over_seeds
from diversed.analysis.drawing import (
    LABEL_GID,
    METHOD_COLOURS,
    method_colour,
    pareto_figure,
)
from diversed.plot import main
from diversed.sweep.results import run_record

HEAD_A = "outputs/2026-11-27_15-55-56/head"  # two runs' heads, named by timestamps
HEAD_B = "outputs/2026-11-28_09-01-02/head"
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}|_\d{2}-\d{2}-\d{2}")


def raw(ns=(3,), heads=((HEAD_A, "toy"), (HEAD_B, "toy_count"))) -> list[dict]:
    """Records of one (pair, task, T): autoregressive, lossless SD, a static front of 11 w, lossy SD,
    typical acceptance with two settings on one spot, and DIVERSED's heads, at each N. DIVERSED and
    lossless SD sit on autoregressive decoding's spot in the time panels."""
    base = dict(pair="p", task="toy", metric="exact_match", temperature=1.0, seed=0, n_examples=40)
    rows = [dict(base, method="autoregressive", score=0.9, normalized_time=1.0)]
    for n in ns:
        spec = dict(base, num_draft_tokens=n)
        rows.append(dict(spec, method="lossless", score=0.9, acceptance_rate=0.5, normalized_time=1.0))
        for i, w in enumerate((0.0, 0.1, 0.2, 0.3, 0.30000001 + 0.1, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)):
            score, acc = 0.1 + 0.08 * i, 1.0 - 0.05 * i
            rows.append(
                dict(
                    spec,
                    method="static",
                    weight=w,
                    score=score,
                    acceptance_rate=acc,
                    normalized_time=0.7 + 0.04 * i,
                )
            )
        rows.append(
            dict(spec, method="lossy", lenience=0.5, score=0.85, acceptance_rate=0.7, normalized_time=0.9)
        )
        for eps in (0.05, 0.3):
            typical = dict(typical_epsilon=eps, typical_delta=0.3, score=0.9, acceptance_rate=0.74)
            rows.append(dict(spec, method="typical", normalized_time=0.85, **typical))
        for head, task in heads:
            dynamic = dict(head=head, head_task=task, score=0.9, acceptance_rate=0.72, mean_w=0.4, alpha=0.85)
            rows.append(dict(spec, method="dynamic", normalized_time=1.0, **dynamic))
    return [run_record(**r) for r in rows]


def records(ns=(3,), heads=((HEAD_A, "toy"), (HEAD_B, "toy_count")), timed=False) -> pd.DataFrame:
    """`raw`'s records averaged over seeds, as the figures take them; `timed`: each time has a measured
    interval (else none has: one seed, no timing repeats)."""
    d = mean_over_seeds(pd.DataFrame(raw(ns, heads)), examples=False)
    d["score_ci_low"], d["score_ci_high"] = d["score"] - 0.05, d["score"] + 0.05
    d["normalized_time_per_token_s"] = d["normalized_time"]
    d["settings_group"] = "g"
    for f in ("normalized_time", "normalized_time_per_token_s"):
        low, high = f"{f.removesuffix('_s')}_ci_low", f"{f.removesuffix('_s')}_ci_high"
        d[low] = d[f] * 0.9 if timed else np.nan
        d[high] = d[f] * 1.1 if timed else np.nan
        ar = d["method"] == "autoregressive"  # against itself: [1, 1], no interval
        d.loc[ar, low], d.loc[ar, high] = 1.0, 1.0
    return d


@pytest.fixture
def drawn(monkeypatch):
    """The report's figures drawn and kept (nothing written): {name: [(figure, caption)]}."""
    figs = []
    monkeypatch.setattr(figures, "_save", lambda fig, *a: figs.append(fig) or [])

    def draw(d: pd.DataFrame, *which: str) -> dict[str, list]:
        out = {}
        for name in which:
            start = len(figs)
            shown = getattr(figures, name)(d, "unused")
            out[name] = list(zip(figs[start:], [s.caption for s in shown], strict=True))
        return out

    return draw


def legend_entries(fig) -> dict[str, str]:
    """{legend text: the colour of its handle} of the figure's legends."""
    out = {}
    for legend in fig.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            out[text.get_text()] = to_hex(handle.get_color())
    return out


def every_text(fig) -> list[str]:
    texts = [t.get_text() for t in fig.findobj(Text)]
    return [t for t in texts if t]


# ---------------------------------------------------------------------------- names


def test_legends_name_heads_by_task_and_print_n_as_an_integer(drawn):
    d = records(ns=(3,), heads=((HEAD_A, "toy"), (HEAD_B, "toy"), ("runs/x/head", None)))
    figs = [pareto_figure(d)] + [
        f for fs in drawn(d, "acceptance_vs_w", "quality_vs_time").values() for f, _ in fs
    ]
    for fig in figs:
        texts = every_text(fig)
        assert not [t for t in texts if TIMESTAMP.search(t) or "/head" in t or "outputs/" in t], texts
        assert not [t for t in texts if re.search(r"N ?= ?\d+\.\d", t)], texts  # N=3, never N=3.0
    legend = legend_entries(figs[0])
    # two heads trained on one task: told apart by a number, in path order; one without a task: so said
    assert {"DIVERSED, head trained on toy #1", "DIVERSED, head trained on toy #2"} <= set(legend)
    assert "DIVERSED, head trained on unknown task #1" in legend
    assert "Static, w labelled" in legend and "Typical δ=0.3, ε labelled" in legend
    assert any("N = 3" in t for t in every_text(figs[0]))
    labels = [t.get_text() for ax in figs[0].axes for t in ax.texts if t.get_gid() == LABEL_GID]
    assert "0.4" in labels and not [t for t in labels if len(t) > 4]  # w=0.30000001 + 0.1 reads 0.4


def test_labels_rename_methods_in_the_legend():
    legend = legend_entries(pareto_figure(records(), labels={"dynamic": "DIVERSED (ours)"}))
    assert "DIVERSED (ours), head trained on toy" in legend and "Lossless SD" in legend


# ---------------------------------------------------------------------------- colours


def test_one_colour_per_method_in_every_figure(drawn):
    d = records(ns=(3, 5))
    pareto = legend_entries(pareto_figure(d))
    others = drawn(d, "quality_vs_time", "time_vs_acceptance")
    for name, ((fig, _),) in others.items():
        legend = legend_entries(fig)
        for label, method in (("Lossless SD", "lossless"), ("DIVERSED, head trained on toy", "dynamic")):
            assert legend[label] == pareto[label] == METHOD_COLOURS[method], (name, label)
    assert pareto["Static, w labelled"] == METHOD_COLOURS["static"]
    assert len(set(METHOD_COLOURS.values())) == len(METHOD_COLOURS)  # no two built-ins alike
    # a method of one's own: a colour from its name, the same every time, none of the built-ins'
    assert method_colour("power") == method_colour("power") not in METHOD_COLOURS.values()


# ---------------------------------------------------------------------------- labels and markers


def marker_boxes(ax, renderer) -> list:
    """Each marker's window extent, computed here from the lines drawn."""
    boxes, scale = [], ax.figure.dpi / 72
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "none", "", " "):
            continue
        half = (line.get_markersize() + line.get_markeredgewidth()) * scale / 2
        for x, y in line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float)):
            if np.isfinite([x, y]).all():
                boxes.append((x - half, y - half, x + half, y + half))
    return boxes


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def check_labels_apart(fig) -> int:
    """No two labels overlap, no label overlaps a marker (as the figure is drawn, after its layout);
    returns the number of labels."""
    fig.canvas.draw()
    renderer, n = fig.canvas.get_renderer(), 0
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_gid() == LABEL_GID]
        boxes = [
            tuple(Text.get_window_extent(t, renderer).extents) for t in labels
        ]  # the text, not its leader
        for (i, a), (j, b) in combinations(enumerate(boxes), 2):
            assert not overlap(a, b), (labels[i].get_text(), labels[j].get_text())
        for label, box in zip(labels, boxes, strict=True):
            assert not [m for m in marker_boxes(ax, renderer) if overlap(box, m)], label.get_text()
        n += len(labels)
    return n


def test_point_labels_overlap_no_label_and_no_marker(drawn):
    d = records(ns=(3, 5))  # the static w crowded, two typical settings on one spot
    pareto = pareto_figure(d, figsize=(9, 3.2))
    placed = check_labels_apart(pareto)
    missed = [t.get_text() for t in pareto.texts if t.get_text().startswith("not labelled")]
    assert placed >= 20 and (placed == 2 * 2 * 14 or missed)  # each value beside its point, or named aside
    ((quality, _),) = drawn(d, "quality_vs_time")["quality_vs_time"]
    assert check_labels_apart(quality) > 0  # N beside the points where the figure has several N


def test_no_marker_hides_another_on_the_same_spot():
    """DIVERSED, lossless SD and autoregressive decoding on one spot of the time panel, a second head a
    hair away: every colour shows, and no two filled markers sit closer than half the bigger one."""
    d = records(heads=((HEAD_A, "toy"), (HEAD_B, "toy_count")))
    d.loc[d["head"] == HEAD_B, "normalized_time"] += 0.003
    fig = pareto_figure(d)
    fig.canvas.draw()
    time_panel = fig.axes[1]
    x, y = time_panel.transData.transform((0.9, 1.0))
    h = fig.canvas.get_width_height()[1]
    pixels = np.asarray(fig.canvas.buffer_rgba())[:, :, :3]
    spot = pixels[int(h - y) - 15 : int(h - y) + 15, int(x) - 15 : int(x) + 15].reshape(-1, 3)
    for method in ("dynamic", "lossless", "autoregressive"):
        rgb = np.array([int(method_colour(method)[i : i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(spot.astype(int) - rgb).sum(axis=1) < 40).any(), method
    filled = [
        (line.get_transform().transform(line.get_xydata())[0], line.get_markersize() * fig.dpi / 72)
        for line in time_panel.get_lines()
        if len(line.get_xydata()) == 1
        and str(line.get_markerfacecolor()) != "none"
        and line.get_marker() != "None"
    ]
    assert len(filled) >= 3
    for (a, size_a), (b, size_b) in combinations(filled, 2):
        assert np.hypot(*(a - b)) >= 0.5 * max(size_a, size_b)


# ---------------------------------------------------------------------------- error bars


def test_error_bars_only_where_an_interval_was_measured(drawn):
    shown = drawn(records(timed=False), "quality_vs_time", "time_vs_acceptance")
    for name, ((fig, caption),) in shown.items():
        assert not [c for ax in fig.axes for c in ax.containers if c.has_xerr or c.has_yerr], name
        assert "no error bars" in caption and "timing.repeats=0" in caption and "95 %" not in caption, name
    shown = drawn(records(timed=True), "quality_vs_time", "time_vs_acceptance")
    for name, ((fig, caption),) in shown.items():
        assert [c for ax in fig.axes for c in ax.containers if c.has_xerr or c.has_yerr], name
        assert "bars: 95 % intervals of the times" in caption, name


# ---------------------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    "option, says",
    [
        (["--formats", "png", "bmp"], r"--formats bmp.*png"),
        (["--style", "no-such-style"], r"--style no-such-style.*seaborn-v0_8-paper"),
        (["--methods", "static", "diversed"], r"unknown method 'diversed'.*dynamic"),
        (["--label", "dynamic"], r"--label 'dynamic'.*METHOD=TEXT"),
        (["--label", "ours=DIVERSED"], r"unknown method 'ours'.*dynamic"),
        (["--figsize", "0", "3"], r"--figsize 0 3.*inches"),
    ],
)
def test_bad_options_are_refused_before_anything_is_read(option, says, tmp_path, capsys):
    missing = tmp_path / "no-such-run"  # read it, and the error would name it instead
    assert main([str(missing), "--out", str(tmp_path / "plots"), *option]) == 2
    err = capsys.readouterr().err
    assert re.search(says, err) and "no-such-run" not in err, err
    assert not (tmp_path / "plots").exists()


def test_options_reach_the_figures(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in raw()))
    out = tmp_path / "plots"
    argv = [
        str(path),
        "--out",
        str(out),
        "--formats",
        "PNG",
        "--figsize",
        "6",
        "2.5",
        "--style",
        "seaborn-v0_8-paper",
    ]
    assert main([*argv, "--methods", "static", "dynamic", "--label", "dynamic=DIVERSED (ours)"]) == 0
    png = out / "pareto_p_toy_T1.png"
    width, height = (int.from_bytes(png.read_bytes()[16 + 4 * i : 20 + 4 * i], "big") for i in range(2))
    assert (width, height) == (900, 375)  # 6 x 2.5 inches at 150 dpi
