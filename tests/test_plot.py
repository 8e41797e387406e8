"""Pareto figures, the summary table and the CLI, on the synthetic fixture (the notebook:
test_notebook.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diversed.analysis.drawing import method_label, plot_pareto, summary_table, write_table
from diversed.plot import run
from diversed.sweep.results import ResultStore, load_results

FIXTURE = Path(__file__).parent / "fixtures" / "results_small.jsonl"
ROOT = Path(__file__).resolve().parents[1]
STATIC_ROWS = [f"Static w={w}" for w in ("1", "0.75", "0.5", "0.25", "0")]
T0_ROWS = ["Autoregressive", "Lossless SD", *STATIC_ROWS, "DIVERSED (tiny-pair/head)"]
FIGURES = {f"pareto_tiny-pair_{t}.png" for t in ("gsm8k_T0", "cnndm_T0", "gsm8k_T1")}


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return load_results(FIXTURE)


def gsm8k_greedy(tmp_path: Path) -> Path:
    """The fixture's gsm8k temperature-0 records alone: one figure, for the slower end-to-end tests."""
    lines = [
        line
        for line in FIXTURE.read_text().splitlines()
        if '"task": "gsm8k"' in line and '"temperature": 0.0' in line
    ]
    path = tmp_path / "gsm8k_greedy.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def check_figures(paths: list[Path]) -> None:
    for p in paths:
        magic = {".png": b"\x89PNG", ".pdf": b"%PDF"}[p.suffix]
        assert p.read_bytes().startswith(magic) and p.stat().st_size > 10_000, p


# ---------------------------------------------------------------------------- figures


def test_plot_pareto_one_figure_per_pair_task_temperature(df, tmp_path):
    paths = plot_pareto(df, tmp_path / "plots", formats=("png",))  # PDFs: see test_cli_end_to_end
    assert {p.name for p in paths} == FIGURES and all(p.parent == tmp_path / "plots" for p in paths)
    check_figures(paths)


def test_plot_pareto_copes_with_missing_measurements(df, tmp_path):
    # no autoregressive run (so no normalised time), one static point without acceptance, one format
    d = df[(df["method"] != "autoregressive") & (df["task"] == "gsm8k") & (df["temperature"] == 0)].copy()
    d["normalized_time"] = np.nan
    d.loc[d.index[2], "acceptance_rate"] = np.nan
    paths = plot_pareto(d, tmp_path, formats=("png",))
    assert [p.name for p in paths] == ["pareto_tiny-pair_gsm8k_T0.png"]
    check_figures(paths)


# ---------------------------------------------------------------------------- table


def test_summary_table_layout_and_values(df):
    table = summary_table(df)  # T = 0 has the most rows; N = 2 and 4 tie, the smaller wins
    assert table.attrs == {"num_draft_tokens": 2, "temperature": 0.0, "best": False}
    assert list(table.index) == [("tiny-pair", r) for r in T0_ROWS]
    assert list(table.columns) == [
        ("gsm8k", "acceptance_rate"),
        ("gsm8k", "accuracy"),
        ("cnndm", "acceptance_rate"),
        ("cnndm", "rouge2"),
    ]
    assert table[("gsm8k", "acceptance_rate")].isna().tolist() == [True] + [False] * 7  # autoregressive

    src = df[(df["num_draft_tokens"] == 2) & (df["temperature"] == 0)].set_index(["task", "method", "weight"])
    for task, metric in (("gsm8k", "accuracy"), ("cnndm", "rouge2")):
        for w in (0.0, 0.25, 0.5, 0.75, 1.0):
            rec = src.loc[(task, "static", w)]
            assert table.loc[("tiny-pair", method_label("static", w)), (task, metric)] == rec["score"]
            assert (
                table.loc[("tiny-pair", method_label("static", w)), (task, "acceptance_rate")]
                == rec["acceptance_rate"]
            )


def test_summary_table_slices_and_seed_means(df):
    t4 = summary_table(df, num_draft_tokens=4, temperature=0.0)
    lossless = df[(df["method"] == "lossless") & (df["num_draft_tokens"] == 4) & (df["temperature"] == 0)]
    assert t4.loc[("tiny-pair", "Lossless SD"), ("gsm8k", "acceptance_rate")] == 0.45
    assert (lossless["acceptance_rate"] == 0.45).all()

    t1 = summary_table(df, temperature=1.0)
    assert t1.attrs["num_draft_tokens"] == 4
    assert list(t1.index.get_level_values("method")) == ["Autoregressive", "Lossless SD", "Static w=0.5"]
    assert list(t1.columns.get_level_values("task").unique()) == ["gsm8k"]

    # a second seed of one setting is averaged with the first
    extra = df[(df["method"] == "lossless") & (df["temperature"] == 1.0)].assign(
        seed=1, score=0.7, key="seed1"
    )
    t1 = summary_table(pd.concat([df, extra]), temperature=1.0)
    assert t1.loc[("tiny-pair", "Lossless SD"), ("gsm8k", "accuracy")] == pytest.approx((0.5 + 0.7) / 2)


def test_write_table_markdown_and_csv(df, tmp_path):
    md, csv = write_table(summary_table(df), tmp_path)
    assert (md.name, csv.name) == ("table.md", "table.csv")
    text = md.read_text().splitlines()
    assert text[0].startswith("N = 2 draft tokens, temperature 0")
    assert (
        text[2]
        == "| pair | method | gsm8k acceptance_rate | gsm8k accuracy | cnndm acceptance_rate | cnndm rouge2 |"
    )
    assert [line.split(" | ")[1] for line in text[4:]] == T0_ROWS
    assert text[4] == "| tiny-pair | Autoregressive | – | 0.600 | – | 0.200 |"
    back = pd.read_csv(csv, index_col=[0, 1])
    assert back.shape == (8, 4)
    assert back.loc[("tiny-pair", "Static w=0.5"), "gsm8k acceptance_rate"] == pytest.approx(0.827)


# ---------------------------------------------------------------------------- CLI


def test_cli_end_to_end(tmp_path, capsys):
    run_dir = tmp_path / "multirun" / "0"  # a run directory written by the store, found recursively
    store = ResultStore(run_dir)
    for line in gsm8k_greedy(tmp_path).read_text().splitlines():
        rec = json.loads(line)
        store.write(
            rec, [dict(example_id="0", completion="", score=rec["score"], new_tokens=1, accepted_drafts=0)]
        )
    out = tmp_path / "plots"
    paths = run(
        [str(tmp_path / "multirun"), "--out", str(out), "--num-draft-tokens", "4", "--temperature", "0"]
    )
    names = [
        "pareto_tiny-pair_gsm8k_T0.png",
        "pareto_tiny-pair_gsm8k_T0.pdf",
        "table.md",
        "table.csv",
        "table_all.md",
        "table_all.csv",
    ]
    assert [p.name for p in paths] == names and all(p.parent == out for p in paths)
    assert capsys.readouterr().out.split() == [str(p) for p in paths]
    check_figures(paths[:2])
    table = (out / "table.md").read_text()
    assert table.startswith("N = 4 draft tokens, temperature 0")
    assert "| tiny-pair | Lossless SD | 0.450 | 0.600 |" in table
    with pytest.raises(SystemExit):
        run([str(run_dir / "examples"), "--out", str(out)])  # no run records there


# ---------------------------------------------------------------------------- method families


def families_frame() -> pd.DataFrame:
    """Records of every method family on one task, with known scores and acceptance rates."""
    from diversed.sweep.results import run_record

    base = {
        "pair": "p",
        "task": "t",
        "metric": "accuracy",
        "temperature": 1.0,
        "seed": 0,
        "n_examples": 100,
        "settings_group": "g",
        "settings": "s",
        "wall_time_s": 1.0,
    }
    rows = [{**base, "method": "autoregressive", "score": 0.80, "score_ci_low": 0.72, "score_ci_high": 0.88}]
    spec = {**base, "num_draft_tokens": 3}
    for w, score, acc in ((1.0, 0.8, 0.4), (0.6, 0.78, 0.55), (0.3, 0.70, 0.70), (0.0, 0.1, 1.0)):
        rows.append({**spec, "method": "static", "weight": w, "score": score, "acceptance_rate": acc})
    for lenience, score, acc in ((0.9, 0.79, 0.45), (0.5, 0.74, 0.6), (0.1, 0.3, 0.9)):
        rows.append({**spec, "method": "lossy", "lenience": lenience, "score": score, "acceptance_rate": acc})
    for rule in ("chow", "opt"):
        for alpha, score, acc in ((0.1, 0.8, 0.42), (0.5, 0.75, 0.58)):
            rows.append(
                {
                    **spec,
                    "method": "cascade",
                    "cascade_rule": rule,
                    "cascade_alpha": alpha,
                    "score": score,
                    "acceptance_rate": acc + (0.01 if rule == "opt" else 0.0),
                }
            )
    for eps, score, acc in ((0.3, 0.80, 0.41), (0.01, 0.5, 0.8)):
        rows.append(
            {
                **spec,
                "method": "typical",
                "typical_epsilon": eps,
                "typical_delta": 0.3,
                "score": score,
                "acceptance_rate": acc,
            }
        )
    rows.append({**spec, "method": "lossless", "score": 0.81, "acceptance_rate": 0.4})
    return pd.DataFrame([run_record(**r) for r in rows])


def test_each_family_is_a_front_and_the_table_keeps_its_best_setting_at_ar_quality(tmp_path):
    from diversed.analysis.fronts import best_at_quality

    df = families_frame()
    best = best_at_quality(df).set_index("method")
    # the floor is the autoregressive score minus its CI half-width: 0.80 − 0.08 = 0.72
    assert best.loc["static", "weight"] == 0.6 and best.loc["lossy", "lenience"] == 0.5
    assert best.loc["typical", "typical_epsilon"] == 0.3 and best["at_quality"].dropna().all()
    assert sorted(best.loc["cascade", "cascade_rule"]) == ["chow", "opt"]  # one best per rule
    table = summary_table(df, best=True)
    labels = list(table.index.get_level_values("method"))
    assert labels == [
        "Autoregressive",
        "Lossless SD",
        "Static w=0.6",
        "Lossy SD l=0.5",
        "Cascade chow α=0.5",
        "Cascade opt α=0.5",
        "Typical ε=0.3 δ=0.3",
    ]
    assert len(summary_table(df)) == 1 + 1 + 4 + 3 + 4 + 2  # every setting
    paths = plot_pareto(df, tmp_path, formats=("png",))
    check_figures(paths)
    from diversed.analysis.drawing import _legend, _lines

    lines = _lines(df)
    assert {(m, tuple(o.values())) for m, o, _ in lines} == {
        ("static", ()),
        ("lossy", ()),
        ("cascade", ("chow",)),
        ("cascade", ("opt",)),
        ("typical", (0.3,)),
    }
    labels = [h.get_label() for h in _legend(df, {})]
    assert (
        "Static, w labelled" in labels
        and "Lossy SD, l labelled" in labels
        and "Cascade rule=chow, α labelled" in labels
    )  # each method by its display name (methods.Method.name_only)
    assert "Typical δ=0.3, ε labelled" in labels  # each knob named by its symbol (methods.Knob)
