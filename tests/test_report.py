"""The report: Tables 1-3 in the paper's layout, every figure, a page per run dir, from a small
results dir written here (numbers known), and end to end from a real sweep on the tiny pair."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from tiny_models import compose_run

from diversed.analysis import published
from diversed.analysis.compare import mean_over_seeds
from diversed.analysis.figures import prop1_gaps, token_class
from diversed.analysis.tables import paper_table, times_table, transfer_table, with_times
from diversed.decoding.verify import SAMPLER
from diversed.report import run, write_report
from diversed.sweep.results import ResultStore, key_digest, load_results, run_record

TASKS = {"alpha_task": "accuracy", "beta_task": "rouge2"}


def _record(pair, task, method, temperature, n=None, score=0.5, acc=None, **extra):
    alpha, mean_tv = extra.pop("alpha", None), extra.pop("mean_tv", None)
    w = extra.pop("mean_w", extra.get("weight"))
    return run_record(
        **{
            "pair": pair,
            "task": task,
            "metric": TASKS[task],
            "method": method,
            "num_draft_tokens": n,
            "temperature": temperature,
            "seed": 0,
            "n_examples": 20,
            "score": score,
            "score_ci_low": score - 0.05,
            "score_ci_high": score + 0.05,
            "acceptance_rate": acc,
            "alpha": alpha,
            "mean_tv": mean_tv,
            "wall_time_s": 1.0,
            "latency_s": 0.1 * (1 if acc is None else 2 - acc),
            "normalized_time": None,
            "normalized_latency": 1.0 if acc is None else 2 - acc,
            "latency_examples": 4,
            "latency_new_tokens": 40,
            "mean_w": w,
            "settings": f"s-{task}",
            "settings_group": f"g-{pair}-{task}",
            **extra,
        }
    )


def write_fixture(run_dir, head_a, head_b):
    """Two pairs x two tasks x T in {1, 0.1}, N = 3: autoregressive 0.60; lossless; a static front whose
    α follows Proposition 1 exactly except one point (+0.02); a head per task, both evaluated on both
    tasks; lossy SD, no setting of which reaches autoregressive quality; a fine-tuned draft."""
    store, rows = ResultStore(run_dir), []
    for pair in ("p1", "p2"):
        for task in TASKS:
            for t in (1.0, 0.1):
                rows.append(_record(pair, task, "autoregressive", t, score=0.60))
                rows.append(
                    _record(
                        pair,
                        task,
                        "lossless",
                        t,
                        3,
                        score=0.60,
                        acc=0.40,
                        alpha=0.5,
                        mean_tv=0.5,
                        verified_drafts=4000,
                        latency_new_tokens=80,  # twice autoregressive decoding's tokens in its 1.6× time
                    )
                )
                rows.append(
                    _record(pair, task, "finetuned_draft", t, 3, score=0.59, acc=0.55, draft_model="/d/draft")
                )
                for w, score in ((0.0, 0.30), (0.5, 0.58), (0.8, 0.60), (1.0, 0.61)):
                    alpha = (
                        1 - w * 0.5 + (0.02 if (w, t, task, pair) == (0.5, 1.0, "alpha_task", "p1") else 0.0)
                    )
                    rows.append(
                        _record(
                            pair,
                            task,
                            "static",
                            t,
                            3,
                            score=score,
                            acc=alpha - 0.1,
                            weight=w,
                            alpha=alpha,
                            mean_tv=0.5,
                            verified_drafts=4000,
                        )
                    )
                for lenience, score in ((0.3, 0.40), (0.6, 0.50)):
                    rows.append(
                        _record(
                            pair, task, "lossy", t, 3, score=score, acc=0.9 - lenience / 2, lenience=lenience
                        )
                    )
                for head, trained in ((head_a, "alpha_task"), (head_b, "beta_task")):
                    own = trained == task
                    rows.append(
                        _record(
                            pair,
                            task,
                            "dynamic",
                            t,
                            3,
                            score=0.62 if own else 0.50,
                            acc=0.80 if own else 0.70,
                            head=str(head),
                            head_task=trained if pair == "p1" else None,
                            mean_w=0.4,
                            alpha=0.85,
                            mean_tv=0.5,
                        )
                    )
    for r in rows:
        examples = []
        if r["method"] == "dynamic":
            examples = [
                {
                    "key": r["key"],
                    "example_id": "ex1",
                    "completion": " so 42.",
                    "score": 1.0,
                    "new_tokens": 4,
                    "accepted_drafts": 2,
                    "token_text": [" so", " 42", ".", "\n"],
                    "token_w": [0.1, 0.9, 0.5, 0.3],
                }
            ]
        store.write(r, examples)
    (run_dir / "settings").mkdir(exist_ok=True)
    (run_dir / "settings" / "s-alpha_task.json").write_text(
        json.dumps({"pair": {"name": "p1"}, "task": {"task": "alpha_task"}, "seed": 0})
    )


@pytest.fixture
def report_dir(tmp_path):
    head_a, head_b = tmp_path / "heads" / "a", tmp_path / "heads" / "b"
    for head, task in (
        (head_a, "alpha_task"),
        (head_b, "beta_task"),
    ):  # p2's records lack head_task: read here
        head.mkdir(parents=True)
        (head / "head_config.json").write_text(json.dumps({"task": task}))
    write_fixture(tmp_path / "run", head_a, head_b)
    return tmp_path


def test_tables_have_the_paper_layout_and_the_right_cells(report_dir):
    df = load_results(report_dir / "run")
    from diversed.report import load_runs

    d = mean_over_seeds(load_runs([report_dir / "run"]))
    table = paper_table(d, 1.0)
    acc, alpha, quality, time = "accepted/proposed %", "α = accepted/verified %", "quality ×100", "time / AR"
    assert list(table.columns) == [
        (t, q) for t in ("alpha_task", "beta_task") for q in (acc, alpha, quality, time)
    ]
    # time relative to autoregressive, per sample at batch 1 (b1): the fixture's latencies, one seed,
    # no passes
    assert table.loc[("p1", "SD (lossless)", "3"), ("alpha_task", time)] == "1.60 b1"
    row = lambda pair, method, n, task="alpha_task": table.loc[(pair, method, n), task].tolist()[:3]  # noqa: E731
    # one seed and no per-example rows: the record's own score interval, no acceptance interval
    assert row("p1", "Autoregressive", "–") == ["–", "–", "60.00 [55.00, 65.00]"]
    assert row("p1", "SD (lossless)", "3") == ["40.00", "50.00", "60.00 [55.00, 65.00]"]
    assert row("p1", "SD, fine-tuned draft", "3", "beta_task")[::2] == ["55.00", "59.00 [54.00, 64.00]"]
    # no validation run: the oracle choice, labelled so; the best static weight at AR quality
    # (0.60 − CI half-width 0.05 = 0.55): w = 0.5, most acceptance
    assert row("p1", "Static, oracle (chosen on test)", "3") == [
        "67.00",
        "77.00",
        "58.00 [53.00, 63.00] (w=0.5)",
    ]
    # no lossy setting reaches it: the best-scoring one, starred
    assert row("p1", "Lossy SD, oracle (chosen on test)", "3")[2] == "50.00 [45.00, 55.00] (l=0.6)*"
    # DIVERSED: in each column the head trained on that column's task (from records, or head_config.json
    # for p2)
    for pair in ("p1", "p2"):
        assert (
            table.loc[(pair, "DIVERSED", "3")].tolist()
            == ["80.00", "85.00", "62.00 [57.00, 67.00]", "1.20 b1"] * 2
        )
    assert len(df) == 2 * 2 * 2 * 11
    # two fine-tuned drafts in one cell: a row each, named by the draft
    twice = pd.concat([d, d[d["method"] == "finetuned_draft"].assign(draft_model="/d/other", score=0.3)])
    rows = paper_table(twice, 1.0).loc["p1"].index.get_level_values("method")
    assert {"SD, fine-tuned draft (d/draft)", "SD, fine-tuned draft (d/other)"} <= set(rows)
    with_paper = paper_table(d, 1.0, paper=True)
    published_row = with_paper.loc[("Llama 8B/1B (paper)", "DIVERSED", "?"), "gsm8k"].tolist()
    assert published_row == ["72.61 (undefined in the paper)", "", "67", ""]  # no α published, no time
    assert {"gsm8k", "xsum", "mbpp"} <= set(with_paper.columns.get_level_values("task"))
    assert (
        paper_table(d, 0.1, paper=True).loc[("Qwen3 8B/0.6B (paper)", "SD", "?"), ("mbpp", quality)] == "67"
    )

    transfer = transfer_table(d, 1.0)
    assert transfer.loc[("p1", "head trained on alpha_task", "3")].tolist() == [
        "80.00 / 62.00 [57.00, 67.00]",
        "70.00 / 50.00 [45.00, 55.00]",
    ]
    assert transfer.loc[("p2", "head trained on beta_task", "3")].tolist() == [
        "70.00 / 50.00 [45.00, 55.00]",
        "80.00 / 62.00 [57.00, 67.00]",
    ]
    assert transfer.loc[("p1", "SD (lossless)", "3"), "beta_task"] == "40.00 / 60.00 [55.00, 65.00]"
    assert transfer_table(d[d["method"] != "dynamic"], 1.0) is None
    paper3 = transfer_table(d, 1.0, paper=True)
    assert paper3.loc[("Llama 8B/1B (paper)", "head trained on gsm8k", "?"), "cnndm"] == "51.07 / 8.63"


def test_times_table_gives_seconds_and_tokens_per_sample_and_both_ratios(report_dir):
    from diversed.report import load_runs

    df = load_runs([report_dir / "run"])
    d = with_times(mean_over_seeds(df), df)
    table = times_table(d, 1.0)
    assert list(table.index) == list(paper_table(d, 1.0).index)  # the paper table's rows
    row = lambda method, n: table.loc[("p1", method, n), "alpha_task"].tolist()  # noqa: E731
    # 4 examples timed; autoregressive decoding 0.1 s (3 significant digits) for 10 tokens per sample
    assert row("Autoregressive", "–") == ["4", "0.100", "10.0", "1.00 [1.00, 1.00]", "1.00 [1.00, 1.00]"]
    # lossless SD: 1.6× per sample for twice the tokens, so 0.8× per token
    assert row("SD (lossless)", "3") == ["4", "0.160", "20.0", "1.60", "0.80"]
    assert row("DIVERSED", "3") == ["4", "0.120", "10.0", "1.20", "1.20"]
    # seconds to 3 significant digits: a toy pair's milliseconds are not rounded to 0.01
    fast = times_table(d.assign(latency_s=d["latency_s"] / 100), 1.0)
    assert fast.loc[("p1", "SD (lossless)", "3"), ("alpha_task", "s / sample b1")] == "0.00160"
    # no latency pass: no table
    assert times_table(d.drop(columns=["latency_s"]), 1.0) is None
    assert times_table(d.assign(latency_s=np.nan), 1.0) is None


def test_the_report_writes_every_table_and_figure(report_dir):
    out = report_dir / "report"
    # PNG only: a PDF of each figure doubles the test's time (the end-to-end test writes both formats)
    paths = run([str(report_dir / "run"), "--out", str(out), "--paper", "--formats", "png"])
    assert paths[0] == out / "README.md"
    for name in ("table_T1", "table_T0.1", "times_T1", "times_T0.1", "transfer_T1", "transfer_T0.1"):
        assert (out / f"{name}.md").is_file() and (out / f"{name}.csv").is_file(), name
    figs = out / "figures"
    for stem in (
        "acceptance_vs_w_p1_alpha_task_T1",
        "acceptance_vs_w_p2_beta_task_T0.1",
        "quality_vs_time_alpha_task_T1",
        "time_vs_acceptance_beta_task_T0.1",
        "pareto_p1_alpha_task_T1",
    ):
        assert (figs / f"{stem}.png").stat().st_size > 1000, stem
    pages = sorted(figs.glob("head_learned_*.html"))
    assert len(pages) == 2 * 2 * 2 * 2  # per pair, task, temperature and head
    html = pages[0].read_text()
    assert html.count('<span style="background:') >= 4 and 'title="w=0.90"' in html and "trained on" in html
    assert len(list(figs.glob("w_by_token_class_*.png"))) == len(pages)
    readme = (out / "README.md").read_text()
    # Proposition 1's caption names the largest gap: the one point 0.02 off
    assert "largest gap over 4 points is +0.0200 (N=3, w=0.5" in readme
    assert "Llama 8B/1B (paper)" in readme and "| p1 | DIVERSED | 3 |" in readme
    for path in re.findall(r"\]\(([^)]+)\)", readme):  # every link resolves
        assert (out / path).exists(), path
    (page,) = (out / "runs").glob("*.md")
    text = page.read_text()
    assert "88 records" in text and "s-alpha_task" in text and "| dynamic | 16 | 4 |" in text
    for path in re.findall(r"\]\(([^)]+)\)", text):
        assert (page.parent / path).exists(), path


def test_prop1_gap_in_standard_errors():
    import pandas as pd

    d = pd.DataFrame(
        [
            {
                "method": "static",
                "weight": 0.5,
                "alpha": 0.77,
                "mean_tv": 0.5,
                "verified_drafts": 10000,
                "num_draft_tokens": 3,
            }
        ]
    )
    g = prop1_gaps(d).iloc[0]
    assert g["predicted"] == 0.75 and g["gap"] == pytest.approx(0.02)
    assert g["gap_se"] == pytest.approx(0.02 / math.sqrt(0.77 * 0.23 / 10000))


def test_quality_vs_time_draws_time_per_sample_and_per_token_with_intervals(tmp_path, monkeypatch):
    """Two seeds per setting: each seed's times against its own seed's autoregressive time, the
    figure's bars the interval over seeds; a panel per sample and one per token for each pair."""
    from diversed.analysis import figures
    from diversed.analysis.tables import with_times

    rows = []
    for seed, ar_time in ((0, 1.0), (1, 2.0)):
        for method, n, w, t, tokens in (
            ("autoregressive", None, None, ar_time, 100),
            ("lossless", 3, None, 0.8, 100),
            ("static", 3, 0.5, 0.6, 50),
            ("static", 3, 1.0, 0.7 + 0.1 * seed, 100),
        ):
            rows.append(
                _record(
                    "p1",
                    "alpha_task",
                    method,
                    1.0,
                    n,
                    acc=None if n is None else 0.5,
                    weight=w,
                    seed=seed,
                    wall_time_s=t,
                    new_tokens=tokens,
                    normalized_latency=None,
                    latency_s=None,
                    settings=f"s{seed}",
                    timing={"batch_size": 4},
                )
            )
    store = ResultStore(tmp_path / "run")
    for r in rows:  # without normalized_time: load_results normalises as evaluate does
        store.write(r, [])
    df = load_results(tmp_path / "run")
    by_seed = df.set_index(["method", "weight", "seed"])
    assert by_seed.loc[("lossless", None, 1), "normalized_time"] == pytest.approx(
        0.4
    )  # 0.8 / its own seed's 2.0
    d = with_times(mean_over_seeds(df), df)
    lossless = d.set_index("method").loc["lossless"]
    g = math.sqrt(0.8 * 0.4)  # the geometric mean of the seeds' ratios 0.8 and 0.4, interval on log ratios
    assert lossless["normalized_time"] == pytest.approx(g)
    assert 0 < lossless["normalized_time_ci_low"] < g < lossless["normalized_time_ci_high"]  # over 2 seeds

    figs = []
    monkeypatch.setattr(figures, "_save", lambda fig, *a: figs.append(fig) or [])
    (shown,) = figures.quality_vs_time(d, tmp_path / "figs")
    (fig,) = figs
    assert len(fig.axes) == 2 and "per token" in shown.caption
    per_sample, per_token = fig.axes
    assert "per sample" in per_sample.get_xlabel() and "per token" in per_token.get_xlabel()
    for ax in fig.axes:  # horizontal bars on the points
        assert any(c.has_xerr for c in ax.containers)
    half = d.set_index(["method", "weight"]).loc[("static", 0.5)]
    assert half["normalized_time_per_token_s"] == pytest.approx(
        2 * half["normalized_time"]
    )  # half the tokens


def test_token_classes():
    assert [
        token_class(t) for t in ["42", " 3.5", " the", "Paris", ".", ",", " def", "(", "x_1", " ", "\n", "é!"]
    ] == [
        "digits",
        "digits",
        "words",
        "words",
        "punctuation",
        "punctuation",
        "code",
        "code",
        "code",
        "whitespace",
        "whitespace",
        "other",
    ]


def test_bad_input_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run([str(tmp_path / "missing"), "--out", str(tmp_path / "r")])
    assert "is not a directory" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="no results.jsonl"):
        write_report([tmp_path], tmp_path / "r")


def test_end_to_end_on_the_tiny_pair(tmp_path, toy_tiny_dir):
    """A head trained on the toy task, swept on both toy tasks with per-token w, then the report:
    records carry head_task and token text, and the transfer table fills in."""
    from diversed.analysis.tables import POOLED_ROWS
    from diversed.evaluate import evaluate
    from diversed.train import train

    small = [
        "+experiment=toy",
        "logger=none",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
        "data.batch_size=4",
        "data.n_val=4",
        "data.val_batch_size=4",
        "data.n_train=16",
        "model.max_new_tokens=6",
    ]
    head = train(compose_run("train", tmp_path / "train", toy_tiny_dir, small))["head_dir"]
    runs = []
    for task in ("toy", "toy_count"):
        cfg = compose_run(
            "evaluate",
            tmp_path / task,
            toy_tiny_dir,
            [
                "+experiment=toy",
                f"task={task}",
                "task.n_examples=6",
                "sweep.methods=[autoregressive,lossless,static,dynamic]",
                "sweep.weights=[0.5,1.0]",
                "sweep.draft_lengths=[2]",
                "sweep.temperatures=[1.0]",
                f"sweep.heads=[{head}]",
                "sweep.token_w=true",
                "timing.repeats=1",
                "timing.latency=true",
                "timing.latency_examples=2",
                "runtime.progress=false",
            ],
        )
        runs.append(evaluate(cfg))
    dyn = load_results(runs[1]).query("method == 'dynamic'").iloc[0]
    assert dyn["head_task"] == "toy" and dyn["verified_drafts"] > 0
    rows = ResultStore(runs[1]).examples(dyn["key"])
    assert (runs[1] / "examples" / f"{key_digest(dyn['key'])}.jsonl").is_file()
    assert all(len(r["token_text"]) == len(r["token_w"]) == r["new_tokens"] for r in rows)
    out = tmp_path / "report"
    write_report(runs, out)
    transfer = (out / "transfer_T1.md").read_text()
    assert "head trained on toy" in transfer and "toy_count" in transfer
    assert list((out / "figures").glob("head_learned_*toy_count*.html"))
    # the head's w over the tokens it weighed: the caption gives the distribution and its bounds
    readme = (out / "README.md").read_text()
    assert "the distribution of w over those tokens (median" in readme and "0.02 / 0.98" in readme
    # DIVERSED paired against the static ensemble at its own mean w (the head starts at w = 0.5)
    paired = (out / "paired_T1.md").read_text()
    assert re.search(
        r"DIVERSED − Static w=0\.5 \(DIVERSED's mean w on reported rows: 0\.(4[5-9]|5[0-5])\d\)", paired
    )
    # decode only beside end to end: the same calls timed to their first token
    times = (out / "times_T1.md").read_text()
    assert "s to first token" in times and "× AR / token, decode only" in times
    assert re.search(r"\| Autoregressive \| – \| 2 \| [^|]+ \| [^|]+ \| 1\.00 \[1\.00, 1\.00\] \|", times)
    # DIVERSED against the static front over w (0.5 and 1): a gap at equal quality and at equal acceptance
    fronts = (out / "fronts_T1.md").read_text()
    assert "| DIVERSED − static front (2 w) |" in fronts and "at equal quality" in fronts
    assert re.search(r"-?\d+\.\d\d \[-?\d+\.\d\d, -?\d+\.\d\d\] (above|below|on the front)", fronts)
    outputs = (out / "outputs_T1.md").read_text()  # empty completions and lengths, every row
    assert "empty %" in outputs and "tokens / example" in outputs and "DIVERSED" in outputs
    assert "at cap %" in outputs and "max_new_tokens" in outputs  # the column and its caption
    # the same comparison pooled over the cells (one head: the chosen row alone; on toy_count the head
    # is Table 3's transfer, not DIVERSED on its own task), in the claims
    pooled = (out / "pooled.md").read_text()
    assert f"| {POOLED_ROWS[0]} | 1 | 6 |" in pooled and f"| {POOLED_ROWS[1]}" not in pooled
    assert "| toy T=1 N=2 |" in pooled and "toy_count" not in pooled
    assert pooled in (out / "claims.md").read_text()
    # each run's page says which sampler drew its records' tokens (every point here sampled, T = 1)
    page = next((out / "runs").glob("*toy_count*.md")).read_text()
    drawn = rf"Tokens drawn by .*: {re.escape(SAMPLER)} \d+ records\n"
    assert re.search(drawn, page) and "not recorded" not in page


@pytest.mark.slow
def test_proposition_1_holds_on_the_toy_pair(tmp_path, toy_pair_dir):
    """At T = 1 the measured α of every static point agrees with 1 − w·mean_tv within sampling error."""
    from diversed.evaluate import evaluate

    cfg = compose_run(
        "evaluate",
        tmp_path / "run",
        toy_pair_dir,
        [
            "+experiment=toy",
            "task.n_examples=200",
            "sweep.methods=[static]",
            "sweep.weights=[0.2,0.5,0.8,1.0]",
            "sweep.draft_lengths=[3,5]",
            "sweep.temperatures=[1.0]",
            "sweep.num_seeds=1",
            "timing.repeats=0",
            "runtime.progress=false",
        ],
    )
    gaps = prop1_gaps(load_results(evaluate(cfg)))
    assert len(gaps) == 8
    assert (gaps["gap_se"] < 4).all(), gaps[["weight", "num_draft_tokens", "alpha", "predicted", "gap_se"]]


def test_published_numbers_match_the_paper_file():
    """Spot checks against ../shared/PAPER.md's tables (the copy in the package is what --paper shows)."""
    assert published.TABLES[(1.0, "llama8b_1b", "lossless", "gsm8k")] == (44.60, 67.0)
    assert published.TABLES[(0.1, "qwen3_8b_0p6b", "dynamic", "xsum")] == (71.22, 7.84)
    assert len(published.TABLES) == 2 * 2 * 3 * 3 and len(published.TRANSFER) == 12


def test_a_caption_says_each_points_seeds_where_points_ran_different_ones():
    """A run resumed with more seeds for some points: the captions say how many points ran which seeds,
    never "mean over 3 seeds" for rows of one."""
    from collections import Counter

    import pandas as pd

    from diversed.report import _how, _point_seeds

    rows = [
        {"pair": "p", "task": "t", "method": "autoregressive", "temperature": 1.0, "seed": s}
        for s in (0, 1, 2)
    ]
    rows += [
        {"pair": "p", "task": "t", "method": "static", "weight": w, "temperature": 1.0, "seed": 0}
        for w in (0.5, 0.8)
    ]
    per_point = _point_seeds(pd.DataFrame(rows))
    assert per_point == Counter({(0, 1, 2): 1, (0,): 2})
    said = _how([0, 1, 2], per_point)
    assert said.startswith(
        "mean over each point's own seeds (3 seeds (0, 1, 2) for 1 point, 1 seed (0) for 2 points of the 3:"
    )
    one = _point_seeds(pd.DataFrame(rows[:1] + rows[3:]))  # every point ran seed 0 alone
    assert one == Counter({(0,): 3}) and _how([0], one).startswith("mean over 1 seed (0) and the examples")


def test_every_head_of_a_cell_meets_the_static_ensemble_at_its_own_mean_w(tmp_path):
    """Two heads of one task (a λ sweep): the heads table pairs each against the static point nearest
    its own mean w (w = 0.4 and 0.8 here), with the head's own cells, and the front table sets each
    against the static front; one head per cell: no heads table."""
    from diversed.analysis.tables import front_table, heads_table

    runs, heads = _two_heads(tmp_path, {"lam1": "heads/lam1/head", "lam4": "heads/lam4/head"})
    table = heads_table(runs, with_times(mean_over_seeds(runs), runs), 1.0)
    assert list(table.index.get_level_values("head")) == ["DIVERSED (lam1/head)", "DIVERSED (lam4/head)"]
    row = table.loc[("p1", "3", "DIVERSED (lam4/head)")]
    assert row[("alpha_task", "static at its mean w")].startswith(
        "Static w=0.8 (DIVERSED's mean w on reported rows: 0.790)"
    )
    assert row[("alpha_task", "quality ×100")].startswith("100.00")
    assert row[("alpha_task", "Δ quality ×100")].startswith("30.00 [")  # 20/20 against 14/20
    low = table.loc[("p1", "3", "DIVERSED (lam1/head)")]
    assert low[("alpha_task", "static at its mean w")].startswith("Static w=0.4")
    assert low[("alpha_task", "Δ quality ×100")].startswith("0.00 [0.00, 0.00] no difference shown")
    assert "Holm over 4 tests" in table.attrs["verdicts"]
    # the front table takes every head too, each by its name, the one chosen on validation said so
    chose_lam1 = _chose(heads["lam1"])
    d = with_times(mean_over_seeds(runs), runs)
    for choices, first in (
        (None, "DIVERSED (lam1/head)"),
        (chose_lam1, "DIVERSED (lam1/head), chosen on validation"),
    ):
        fronts = front_table(runs, d, 1.0, choices)
        assert sorted(fronts.index.get_level_values(2)) == [
            f"{first} − static front (2 w)",
            "DIVERSED (lam4/head) − static front (2 w)",
        ]
    one = runs[runs["head"].astype(str) != str(heads["lam4"])]
    assert heads_table(one, with_times(mean_over_seeds(one), one), 1.0) is None


def test_a_head_meets_the_static_point_on_its_own_rows_not_one_on_fresh_rows(tmp_path):
    """A directory holding the same protocol on other rows (task.skip_examples: another settings group
    of the same comparison group, no example shared): the head at mean w 0.79 meets w = 0.8 on its own
    rows, not the w = 0.79 point on the fresh rows."""
    from diversed.analysis.tables import heads_table
    from diversed.report import load_runs

    _two_heads(tmp_path, {"lam1": "heads/lam1/head", "lam4": "heads/lam4/head"})
    store = ResultStore(tmp_path / "run")
    rec = _record("p1", "alpha_task", "static", 1.0, 3, score=0.0, acc=0.5, weight=0.79, comparison_group="g")
    rec |= {"settings": "s-fresh", "settings_group": "g-fresh", "n_examples": 20}
    rec["key"] = rec["key"].replace("s-alpha_task", "s-fresh")
    row = {"example_id": "", "completion": "x", "score": 0.0, "new_tokens": 4, "accepted_drafts": 1}
    store.write(rec, [{**row, "example_id": f"fresh{i}", "proposed_drafts": 2} for i in range(20)])
    runs = load_runs([tmp_path / "run"])
    table = heads_table(runs, with_times(mean_over_seeds(runs), runs), 1.0)
    row = table.xs("DIVERSED (lam4/head)", level=2).iloc[0]  # (the pair labelled with its settings group)
    assert row[("alpha_task", "static at its mean w")].startswith("Static w=0.8 (")
    assert row[("alpha_task", "Δ quality ×100")].startswith("30.00 [")


def test_the_pooled_table_averages_each_examples_comparisons_and_rows_the_chosen_head(tmp_path):
    """Two heads of one cell (lam1 equal to the static point at its mean w, lam4 one better on 6 of 20
    examples): every head pooled gives each example the mean of its two differences (15 points); with
    lam1 chosen on validation the chosen row holds lam1 alone (0 points); one head per cell: no second
    row, the only head counts as chosen."""
    from diversed.analysis.tables import POOLED_ROWS, pooled_table

    runs, heads = _two_heads(tmp_path / "a", {"lam1": "heads/lam1/head", "lam4": "heads/lam4/head"})
    d = with_times(mean_over_seeds(runs), runs)
    every = pooled_table(runs, d)
    assert list(every.index) == [("p1", POOLED_ROWS[1])]  # nothing chosen: no chosen row
    row = every.loc[("p1", POOLED_ROWS[1])]
    assert (
        row["comparisons"] == "2" and row["examples"] == "20" and row["cells pooled"] == "alpha_task T=1 N=3"
    )
    assert row["Δ quality ×100"].startswith("15.00 [") and row["their own Δ ×100"] == "0.00 to 30.00"
    chose = _chose(heads["lam1"])
    both = pooled_table(runs, d, chose)
    assert list(both.index) == [("p1", POOLED_ROWS[0]), ("p1", POOLED_ROWS[1])]
    assert both.loc[("p1", POOLED_ROWS[0]), "Δ quality ×100"].startswith("0.00 [0.00, 0.00]")
    assert both.loc[("p1", POOLED_ROWS[0]), "comparisons"] == "1"
    assert "Holm over 2 tests" in both.attrs["verdicts"]
    one = runs[runs["head"].astype(str) != str(heads["lam1"])]
    alone = pooled_table(one, with_times(mean_over_seeds(one), one))
    assert list(alone.index) == [("p1", POOLED_ROWS[0])]
    assert alone.loc[("p1", POOLED_ROWS[0]), "Δ quality ×100"].startswith("30.00 [")
    statics = runs[runs["method"] != "dynamic"]
    assert pooled_table(statics, with_times(mean_over_seeds(statics), statics)) is None
    # an autoregressive point under other settings does not split the pair's row: no head pairs with it
    other = pd.DataFrame([{**runs.iloc[0].to_dict(), "method": "autoregressive", "settings_group": "old"}])
    mixed = pd.concat([runs, other], ignore_index=True)
    assert list(pooled_table(mixed, with_times(mean_over_seeds(mixed), mixed)).index.get_level_values(0)) == [
        "p1"
    ]


def test_the_pooled_table_counts_an_example_once_across_temperatures_and_apart_across_tasks(tmp_path):
    """The same two heads at T = 1 and 0.1 with the same outcomes: four comparisons of the same 20
    examples, so the pooled difference and its interval are one temperature's (an example is one cluster
    whatever its cells); a second task with the same example ids adds 20 examples of its own."""
    from diversed.analysis.tables import POOLED_ROWS, pooled_table

    heads = {"lam1": "heads/lam1/head", "lam4": "heads/lam4/head"}
    one, _ = _two_heads(tmp_path / "one", heads)
    two, _ = _two_heads(tmp_path / "two", heads, temperatures=(1.0, 0.1))
    once, twice = (
        pooled_table(r, with_times(mean_over_seeds(r), r)).loc[("p1", POOLED_ROWS[1])] for r in (one, two)
    )
    assert (twice["comparisons"], twice["examples"]) == ("4", "20")
    assert twice["cells pooled"] == "alpha_task T=1 N=3; alpha_task T=0.1 N=3"
    assert twice["Δ quality ×100"] == once["Δ quality ×100"] and once["Δ quality ×100"].startswith("15.00 [")
    both, _ = _two_heads(tmp_path / "two", {"b1": "beta/lam1/head", "b4": "beta/lam4/head"}, task="beta_task")
    row = pooled_table(both, with_times(mean_over_seeds(both), both)).loc[("p1", POOLED_ROWS[1])]
    assert (row["comparisons"], row["examples"]) == ("6", "40") and "beta_task T=1 N=3" in row["cells pooled"]
    lo, hi = (float(x) for x in re.findall(r"-?\d+\.\d+", row["Δ quality ×100"])[1:3])
    lo1, hi1 = (float(x) for x in re.findall(r"-?\d+\.\d+", once["Δ quality ×100"])[1:3])
    assert hi - lo < hi1 - lo1  # twice the examples, a narrower interval


def _chose(head) -> pd.DataFrame:
    """A validation choice (`fronts.choose_on`'s row) of `head` in `_two_heads`' cell."""
    return pd.DataFrame(
        [
            {
                "pair": "p1",
                "task": "alpha_task",
                "temperature": 1.0,
                "comparison_group": "g",
                "num_draft_tokens": 3,
                "method": "dynamic",
                "family": "head",
                "value": str(head),
                "split": "validation",
                "non_inferior": True,
                "margin": 0.05,
            }
        ]
    )


def _two_heads(tmp_path, paths: dict[str, str], temperatures=(1.0,), task: str = "alpha_task"):
    """A run of one task with two heads (name: path under tmp_path; the first at mean w 0.41, the second
    at 0.79 and better) and static points at w = 0.4 and 0.8, each at every temperature given and on the
    same 20 example ids: (records, {name: head dir})."""
    from diversed.report import load_runs

    store = ResultStore(tmp_path / "run")
    heads = {}
    for name, path in paths.items():
        heads[name] = tmp_path / path
        heads[name].mkdir(parents=True, exist_ok=True)
        (heads[name] / "head_config.json").write_text(json.dumps({"task": task}))
    first, second = paths
    points = [
        ("static", {"weight": 0.4}, [1.0] * 10 + [0.0] * 10, 30),
        ("static", {"weight": 0.8}, [1.0] * 14 + [0.0] * 6, 20),
        ("dynamic", {"head": str(heads[first]), "mean_w": 0.41}, [1.0] * 10 + [0.0] * 10, 34),
        ("dynamic", {"head": str(heads[second]), "mean_w": 0.79}, [1.0] * 20, 20),
    ]
    for (method, extra, scores, accepted), t in ((p, t) for t in temperatures for p in points):
        rec = _record(
            "p1",
            task,
            method,
            t,
            3,
            score=float(np.mean(scores)),
            acc=accepted / 40,
            comparison_group="g",
            **extra,
        )
        rec["n_examples"] = len(scores)
        examples = [
            {
                "example_id": f"ex{i}",
                "completion": "x",
                "score": s,
                "new_tokens": 4,
                "accepted_drafts": accepted // 20,
                "proposed_drafts": 2,
            }
            for i, s in enumerate(scores)
        ]
        store.write(rec, examples)
    return load_runs([tmp_path / "run"]), heads


def test_two_heads_whose_paths_end_alike_keep_a_row_each(tmp_path):
    """Heads from two runs' directories, both `.../train_mbpp/head`: every table names each by the
    shortest tail of its path that tells them apart, where the last two parts would have merged their
    rows (one head's cells written over the other's)."""
    from diversed.analysis.tables import front_table, heads_table, paired_table
    from diversed.sweep.methods import head_labels

    runs, _ = _two_heads(tmp_path, {"a": "run_a/train_mbpp/head", "b": "run_b/train_mbpp/head"})
    d = with_times(mean_over_seeds(runs), runs)
    names = ["DIVERSED (run_a/train_mbpp/head)", "DIVERSED (run_b/train_mbpp/head)"]
    table = heads_table(runs, d, 1.0)
    assert list(table.index.get_level_values("head")) == names
    assert table.loc[("p1", "3", names[1]), ("alpha_task", "quality ×100")].startswith("100.00")
    assert table.loc[("p1", "3", names[0]), ("alpha_task", "quality ×100")].startswith("50.00")
    fronts = front_table(runs, d, 1.0)
    assert sorted(fronts.index.get_level_values(2)) == [f"{n} − static front (2 w)" for n in names]
    paired = paired_table(runs, d, 1.0)
    assert {k.split(" − ")[0] for k in paired.index.get_level_values(2)} == set(names)
    from diversed.analysis.drawing import summary_table  # plot's table.md: a row each too

    summary = summary_table(runs, temperature=1.0)
    assert {m for m in summary.index.get_level_values("method") if m.startswith("DIVERSED")} == set(names)
    # the labels themselves: two parts where they differ, as long as needed where they do not
    labels = head_labels(["x/a/h", "y/b/h", "z/q/a/h", "x/a/h"])
    assert labels == {"x/a/h": "x/a/h", "y/b/h": "b/h", "z/q/a/h": "q/a/h"}
    # a dot in a name is the name's own (lam0.5, Qwen2.5-Coder-0.5B), a weights file's suffix dropped
    assert head_labels(["runs/x/lam0.5", "runs/x/lam0.25"]) == {
        "runs/x/lam0.5": "x/lam0.5",
        "runs/x/lam0.25": "x/lam0.25",
    }
    assert head_labels(["m/Qwen2.5-Coder-0.5B", "d/draft.gguf"]) == {
        "m/Qwen2.5-Coder-0.5B": "m/Qwen2.5-Coder-0.5B",
        "d/draft.gguf": "d/draft",
    }
    assert head_labels(["runs/h.pt", "runs/h.gguf"]) == {
        "runs/h.pt": "runs/h.pt",
        "runs/h.gguf": "runs/h.gguf",
    }


def test_a_heads_w_figure_pools_the_points_seeds(tmp_path):
    """The w-by-token figure is named per point and head (no seed in the name), so a point decoded at
    several seeds gets one figure and one caption over every seed's tokens, not one per seed each
    overwriting the last."""
    head = tmp_path / "head"
    head.mkdir()
    (head / "head_config.json").write_text(json.dumps({"task": "alpha_task"}))
    store = ResultStore(tmp_path / "run")
    store.write(_record("p1", "alpha_task", "autoregressive", 1.0), [])
    for seed, ws in ((0, [0.1, 0.9]), (1, [0.5, 0.5, 0.3])):
        r = _record("p1", "alpha_task", "dynamic", 1.0, 3, head=str(head), head_task="alpha_task", seed=seed)
        store.write(
            r,
            [
                {
                    "key": r["key"],
                    "example_id": f"ex{seed}",
                    "completion": "x",
                    "score": 1.0,
                    "new_tokens": len(ws),
                    "accepted_drafts": 1,
                    "token_text": [" so", " 42", "."][: len(ws)],
                    "token_w": ws,
                }
            ],
        )
    out = tmp_path / "report"
    run([str(tmp_path / "run"), "--out", str(out), "--formats", "png"])
    assert len(list((out / "figures").glob("w_by_token_class_*.png"))) == 1
    readme = (out / "README.md").read_text()
    (caption,) = re.findall(r"What the head learned[^\n]*", readme)
    # five tokens of two completions, one per seed: 0.1, 0.9, 0.5, 0.5, 0.3 (seed 1's alone: min 0.30)
    assert "over 5 tokens of 2 completions (2 seeds pooled)" in caption and "min 0.10" in caption
    (page,) = (out / "figures").glob("head_learned_*.html")
    assert "(score 1.0, seed 0)" in page.read_text() and "(score 1.0, seed 1)" in page.read_text()
    # the same head and point decoded under another setting: a figure of its own, named by its settings
    r = _record(
        "p1",
        "alpha_task",
        "dynamic",
        1.0,
        3,
        head=str(head),
        head_task="alpha_task",
        settings="s-other",
        settings_group="g-other-max-tokens",
    )
    row = {"key": r["key"], "example_id": "ex9", "completion": "x", "score": 0.0, "new_tokens": 1}
    store.write(r, [row | {"accepted_drafts": 0, "token_text": ["."], "token_w": [0.7]}])
    out = tmp_path / "report2"
    run([str(tmp_path / "run"), "--out", str(out), "--formats", "png"])
    figures = sorted(p.name for p in (out / "figures").glob("w_by_token_class_*.png"))
    assert [f.split("_settings-")[1] for f in figures] == ["g-othe.png", "g-p1-a.png"], figures
    captions = re.findall(r"What the head learned[^\n]*", (out / "README.md").read_text())
    assert sorted(re.search(r"over (\d+) tokens", c).group(1) for c in captions) == ["1", "5"]
