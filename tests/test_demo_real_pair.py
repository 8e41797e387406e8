"""The pair demo's plan without weights (`scripts/demo_real.py --pair qwen25coder`): each step is the
command it says, the knob families run only at --families-at, autoregressive-only tasks at their own
temperatures before the heads, and a demo run in two invocations into one --out is reported and said
whole (every run directory, every invocation's arguments)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_demo_real_rows import demo  # noqa: F401  (the script, imported as a module)

ROOT = Path(__file__).resolve().parents[1]


def _value(argv: tuple[str, ...], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(key + "=")), None)


@pytest.fixture
def fake(demo, monkeypatch, tmp_path):  # noqa: F811
    """`run` replaced by a recorder that writes what each step would leave: the pilot's and sweeps'
    records, a head, the report's claims."""
    import diversed.models.gguf as gguf

    monkeypatch.setattr(gguf, "check_member", lambda *a, **k: None)
    calls: list[tuple[str, ...]] = []

    def run(title, *argv, eta_s=None, limit_s=None):
        calls.append(argv)
        module = argv[1]
        if module == "diversed.train":
            head = Path(_value(argv, "hydra.run.dir")) / "head"
            head.mkdir(parents=True)
            config = {
                "reg_scale": float(_value(argv, "model.reg_scale")),
                "objective": _value(argv, "model.objective"),
            }
            (head / "head_config.json").write_text(json.dumps(config))
        elif module == "diversed.distill":
            draft = Path(_value(argv, "hydra.run.dir")) / "draft"
            draft.mkdir(parents=True)
            (draft / "config.json").write_text("{}")
        elif module == "diversed.evaluate":
            run_dir = Path(_value(argv, "hydra.run.dir"))
            run_dir.mkdir(parents=True, exist_ok=True)
            n = int(_value(argv, "task.n_examples"))
            methods = _value(argv, "sweep.methods").strip("[]").split(",")
            temps = [float(t) for t in _value(argv, "sweep.temperatures").strip("[]").split(",")]
            heads = (_value(argv, "sweep.heads") or "[]").strip("[]").split(",")
            ns = [int(x) for x in (_value(argv, "sweep.draft_lengths") or "[5]").strip("[]").split(",")]
            with (run_dir / "results.jsonl").open("a") as f:
                for m in methods:
                    for t in temps:
                        for N in ns:  # a head's w: 0.8, 0.7, ... at N = 5, 0.03 lower per draft token less
                            for i, h in enumerate(heads if m == "dynamic" else [None]):
                                rec = {"method": m, "n_examples": n, "scored_wall_time_s": 2.0 * n}
                                w = round(0.8 - 0.1 * i - 0.03 * (5 - N), 4)
                                rec |= {"temperature": t, "head": h, "mean_w": w, "num_draft_tokens": N}
                                f.write(json.dumps(rec) + "\n")
        elif module == "diversed.report":
            out = Path(argv[argv.index("--out") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "claims.md").write_text("claims\n")
        return 1.0

    monkeypatch.setattr(demo, "run", run)
    page = tmp_path / "page.md"
    page.write_text(f"# page\n{demo.PAIR_BEGIN}\nold\n{demo.PAIR_END}\n")
    return calls, page


def _main(demo, monkeypatch, argv):  # noqa: F811
    monkeypatch.setattr(sys, "argv", ["demo_real.py", *argv])
    demo.main()


def test_the_pair_demo_runs_its_plan_and_says_every_invocation(demo, fake, tmp_path, monkeypatch):  # noqa: F811
    calls, page = fake
    out = tmp_path / "out"
    common = ["--pair", "qwen25coder", "--out", str(out), "--draft-lengths", "5", "--weights", "0.5"]
    common += ["--pilot", "4", "--n-examples", "4", "--budget-min", "600", "--docs", str(tmp_path / "docs")]
    common += ["--page", str(page), "--lambdas", "4"]
    first = ["--tasks", "mbpp", "--temperatures", "1", "0.1", "--families", "lossy", "typical"]
    first += ["--families-at", "1", "--ar-tasks", "xsum"]
    _main(demo, monkeypatch, [*common, *first])
    steps = [
        (a[1], _value(a, "task"), _value(a, "sweep.methods"), _value(a, "sweep.temperatures")) for a in calls
    ]
    assert steps == [
        ("diversed.evaluate", "mbpp", "[autoregressive,lossless]", "[1]"),  # the pilot
        ("diversed.evaluate", "xsum", "[autoregressive]", "[1,0.1]"),  # AR alone, before the heads
        ("diversed.train", "mbpp", None, None),
        ("diversed.evaluate", "mbpp", "[dynamic]", "[1,0.1]"),  # the head's mean w on validation rows
        ("diversed.evaluate", "mbpp", "[autoregressive,lossless,static,dynamic]", "[1]"),
        ("diversed.evaluate", "mbpp", "[autoregressive,lossless,static,dynamic]", "[0.1]"),
        ("diversed.evaluate", "mbpp", "[lossy,typical]", "[1]"),  # the families at --families-at only
        ("diversed.report", None, None, None),
    ]
    train = calls[2]  # the teacher-forced objective at λ = 4, its steps the run's own
    head = out / "train_mbpp" / "teacher_forced_lam4"
    assert _value(train, "hydra.run.dir") == str(head) and _value(train, "model.reg_scale") == "4"
    assert (
        _value(train, "model.objective") == "teacher_forced" and _value(train, "trainer.max_steps") == "200"
    )
    assert len({_value(c, "hydra.run.dir") for c in calls[4:7]}) == 1  # one run: resumed
    # the static front: --weights and the head's validation mean w, on the test rows
    assert _value(calls[4], "sweep.weights") == "[0.5,0.8]" and _value(calls[4], "task.split") is None
    assert _value(calls[4], "sweep.heads") == f"[{head / 'head'}]"
    assert _value(calls[3], "task.split") == "validation"

    # a second invocation into the same --out: its task, and AR alone at its own temperature; another
    # demo's run directory in the same folder is none of this demo's
    foreign = out / "sweep_cnndm"
    foreign.mkdir()
    (foreign / "results.jsonl").write_text("{}\n")
    calls.clear()
    second = ["--tasks", "gsm8k", "--temperatures", "1", "--families", "--ar-tasks", "gsm8k"]
    second += ["--ar-temperatures", "0.1"]
    _main(demo, monkeypatch, [*common, *second])
    assert (_value(calls[1], "task"), _value(calls[1], "sweep.temperatures")) == ("gsm8k", "[0.1]")
    assert not any(_value(a, "sweep.methods") == "[]" for a in calls)  # no families: no call for them
    report = calls[-1]
    reported = [Path(a).name for a in report[2 : report.index("--out")]]
    assert reported == ["validation_mbpp", "validation_gsm8k", "sweep_mbpp", "sweep_xsum", "sweep_gsm8k"]
    said = page.read_text()
    assert "in 2 invocations" in said and "tasks mbpp;" in said and "tasks gsm8k;" in said
    assert (
        "lossy, typical at T in 1," in said and "autoregressive decoding alone on gsm8k at T in 0.1" in said
    )
    assert said.count("--families-at 1") == 1  # each invocation's own arguments, once
    # a rerun of an invocation (a resume) is said once
    _main(demo, monkeypatch, [*common, *second])
    assert page.read_text().count("tasks gsm8k;") == 1


def test_skip_examples_reaches_every_test_row_call(demo, fake, tmp_path, monkeypatch):  # noqa: F811
    calls, page = fake
    argv = ["--out", str(tmp_path / "out"), *"--pair qwen25coder --draft-lengths 5 --weights 0.5".split()]
    argv += "--pilot 4 --n-examples 4 --budget-min 600 --lambdas 1 --tasks mbpp --temperatures 0.1".split()
    argv += "--ar-tasks gsm8k --skip-examples 64".split()
    _main(demo, monkeypatch, [*argv, "--docs", str(tmp_path / "docs"), "--page", str(page)])
    decoded = [c for c in calls if c[1] == "diversed.evaluate"]
    test = [c for c in decoded if _value(c, "task.split") != "validation"]
    # the pilot, gsm8k's AR, the test sweep and its families; the head's mean w on validation rows
    assert len(test) == 4 and len(decoded) == 5
    assert all(_value(c, "task.skip_examples") == "64" for c in test)
    assert all(_value(c, "task.skip_examples") is None for c in decoded if c not in test)
    assert "4 test rows per grid point (after the first 64 the seed draws" in page.read_text()
    # a second invocation into that --out on other rows (no skip) is refused before anything runs
    test = tmp_path / "out" / "sweep_mbpp"
    (test / "settings").mkdir()
    (test / "results.jsonl").write_text(json.dumps({"settings": "d1"}) + "\n")
    (test / "settings" / "d1.json").write_text(json.dumps({"task": {"skip_examples": 64}}))
    calls.clear()
    with pytest.raises(
        SystemExit, match="sweep_mbpp holds test points on the rows after the seed's first 64"
    ):
        _main(demo, monkeypatch, argv[:-2])
    assert calls == [] and demo.rows_mixed(test, 64) is None  # the same rows: read beside them
    with pytest.raises(SystemExit):
        _main(demo, monkeypatch, [*argv[:-1], "-1"])


def test_families_at_a_temperature_not_run_is_refused_before_anything_runs(demo, fake, tmp_path, monkeypatch):  # noqa: F811
    calls, _ = fake
    argv = [
        "--pair",
        "qwen25coder",
        "--out",
        str(tmp_path / "out"),
        "--temperatures",
        "1",
        "--families-at",
        "0.1",
    ]
    with pytest.raises(SystemExit) as e:
        _main(demo, monkeypatch, argv)
    assert e.value.code == 2 and not calls and not (tmp_path / "out").exists()


def test_the_head_is_chosen_per_temperature_on_validation_among_every_head_trained(
    demo,  # noqa: F811
    fake,
    tmp_path,
    monkeypatch,
):
    """Two λ and a head an earlier invocation trained: validation decodes all three and autoregressive
    decoding (one seed: --val-seeds); the test sweep at --front-at takes every head, elsewhere the head
    chosen there (choose_on), each with the static ensemble at its validation mean w on the front; the
    fine-tuned draft beside lossless SD; the docs name the choice."""
    import pandas as pd

    import diversed.analysis.fronts as fronts
    import diversed.report as report

    calls, page = fake
    out = tmp_path / "out"
    earlier = out / "train_mbpp" / "head"
    earlier.mkdir(parents=True)
    (earlier / "head_config.json").write_text(json.dumps({"reg_scale": 0.5}))  # before --objective
    lam16 = out / "train_mbpp" / "teacher_forced_lam16" / "head"
    picked = {1.0: str(lam16), 0.1: str(earlier)}
    monkeypatch.setattr(report, "load_runs", lambda dirs: pd.DataFrame())
    monkeypatch.setattr(
        fronts,
        "choose_on",
        lambda runs: pd.DataFrame(
            [{"method": "dynamic", "temperature": t, "value": h} for t, h in picked.items()]
        ),
    )
    argv = ["--pair", "qwen25coder", "--out", str(out), "--draft-lengths", "5", "--weights", "0.5"]
    argv += ["--pilot", "4", "--n-examples", "4", "--budget-min", "600", "--docs", str(tmp_path / "docs")]
    argv += ["--page", str(page), "--tasks", "mbpp", "--families", "--lambdas", "1", "16", "--distill"]
    argv += ["--seeds", "3", "--val-seeds", "1", "--front-at", "1"]
    _main(demo, monkeypatch, argv)
    trained = [
        (a[1], _value(a, "hydra.run.dir")) for a in calls if a[1] in ("diversed.train", "diversed.distill")
    ]
    assert trained == [
        *(("diversed.train", str(out / "train_mbpp" / f"teacher_forced_lam{x}")) for x in (1, 16)),
        ("diversed.distill", str(out / "distill_mbpp")),  # the fine-tuned draft, before validation
    ]
    validation = next(a for a in calls if _value(a, "task.split") == "validation")
    assert _value(validation, "sweep.methods") == "[autoregressive,dynamic]"
    assert _value(validation, "sweep.num_seeds") == "1"  # --val-seeds: the test rows' 3 do not apply
    heads = _value(validation, "sweep.heads").strip("[]").split(",")
    assert heads == [str(earlier), str(lam16.parent.parent / "teacher_forced_lam1" / "head"), str(lam16)]
    tests = [a for a in calls if a[1] == "diversed.evaluate" and "sweep_mbpp" in _value(a, "hydra.run.dir")]
    by_t = {_value(a, "sweep.temperatures"): a for a in tests if _value(a, "sweep.heads")}
    # --front-at 1: every head at T = 1, each beside the static ensemble at its own mean w (fake: 0.8,
    # 0.7, 0.6); at T = 0.1 the head chosen there
    assert _value(by_t["[1]"], "sweep.heads") == f"[{','.join(heads)}]"
    assert _value(by_t["[1]"], "sweep.weights") == "[0.5,0.6,0.7,0.8]"
    for a in by_t.values():  # lossless SD with the distilled draft beside the pair's own
        assert _value(a, "sweep.methods") == "[autoregressive,lossless,finetuned_draft,static,dynamic]"
        assert _value(a, "sweep.draft_models") == f"[{out / 'distill_mbpp' / 'draft'}]"
        assert _value(a, "sweep.num_seeds") == "3"
    assert (
        _value(by_t["[0.1]"], "sweep.heads") == f"[{earlier}]"
        and _value(by_t["[0.1]"], "sweep.weights") == "[0.5,0.8]"
    )
    said = page.read_text()
    assert (
        "every head on the test rows for mbpp at T = 1: train_mbpp (reinforce, λ = 0.5), mean w 0.800, "
        "teacher_forced_lam1 (teacher_forced, λ = 1), mean w 0.700, teacher_forced_lam16 (teacher_forced, "
        "λ = 16), mean w 0.600;" in said
    )
    assert (
        "the head chosen there on the test rows for mbpp at T = 0.1: train_mbpp (reinforce, λ = 0.5)" in said
    )
    assert "mbpp: 2 of 2 exported" in said
    assert "the fine-tuned draft (the draft distilled on the train rows of mbpp" in said
    assert "3 seed(s) (1 on the validation rows), batch 8" in said


def test_validation_rows_of_another_size_are_refused_before_anything_runs(demo, fake, tmp_path, monkeypatch):  # noqa: F811
    """An earlier invocation's validation points on 16 rows, this one's on 32: the choice and the mean w
    would pool them; refused, naming the directory and the fix, before any step."""
    calls, _ = fake
    out = tmp_path / "out"
    (out / "validation_mbpp").mkdir(parents=True)
    (out / "validation_mbpp" / "results.jsonl").write_text(
        json.dumps({"method": "dynamic", "n_examples": 16}) + "\n"
    )
    argv = ["--pair", "qwen25coder", "--out", str(out), "--tasks", "mbpp", "--val-examples", "32"]
    with pytest.raises(SystemExit, match=r"validation_mbpp holds validation points on 16 rows.*Move that"):
        _main(demo, monkeypatch, argv)
    assert not calls


def test_validation_points_of_two_protocols_are_refused_naming_what_differs(
    demo,  # noqa: F811
    fake,
    tmp_path,
    monkeypatch,
):
    """An earlier invocation's validation points at 128 new tokens beside this protocol's at 256: one
    comparison group each, so a head's mean w or a choice would pool two protocols. Refused before any
    step where the directory holds both, naming the setting that differs (not the rows, seeds or heads,
    which no group has); and after this invocation's validation sweep where that sweep added the second
    (its points kept)."""
    calls, _ = fake
    out = tmp_path / "out"
    validation = out / "validation_mbpp"
    (validation / "settings").mkdir(parents=True)

    def point(group: str, tokens: int, seed: int, head: str) -> dict:
        settings = {
            "task": {
                "max_new_tokens": tokens,
                "split": "validation",
                "n_examples": 32,
                "data_files": {"x": seed},
            },
            "batch_size": 8,
            "seed": seed,
            "head": head,
        }
        (validation / "settings" / f"{group}{seed}.json").write_text(json.dumps(settings))
        return {
            "method": "dynamic",
            "n_examples": 32,
            "comparison_group": group,
            "settings": f"{group}{seed}",
        }

    lines = [point("g256", 256, 0, "a"), point("g256", 256, 1, "b")]
    (validation / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert demo.validation_pooled(validation, 32) is None  # one protocol: seeds and heads differ only
    lines.append(point("g128", 128, 2, "c"))
    (validation / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    said = demo.validation_pooled(validation, 32)
    assert "2 protocols (comparison groups g256, g128: task.max_new_tokens: 256 / 128)" in said
    assert "head" not in said.split("Move")[0].split("g128")[1] and "seed" not in said
    # a group whose settings cannot be read: said so, no setting named for it
    # (first: each value stays under its own group's name)
    unread = [{**point("g64", 64, 4, "e"), "settings": "gone"}]
    (validation / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unread + lines))
    said = demo.validation_pooled(validation, 32)
    assert "3 protocols (comparison groups g64, g256, g128: task.max_new_tokens: ? / 256 / 128; " in said
    assert "; settings of g64 not readable)" in said
    argv = ["--pair", "qwen25coder", "--out", str(out), "--tasks", "mbpp", "--val-examples", "32"]
    with pytest.raises(
        SystemExit, match=r"validation_mbpp holds validation points at task.max_new_tokens 128"
    ):
        _main(demo, monkeypatch, argv)
    # one protocol, not this invocation's (--max-new-tokens 256, the default): refused before any step too
    (validation / "results.jsonl").write_text(json.dumps(lines[2]) + "\n")
    assert demo.validation_pooled(validation, 32) is None  # one group: only this invocation's settings tell
    with pytest.raises(SystemExit, match=r"at task.max_new_tokens 128, this invocation decodes at 256"):
        _main(demo, monkeypatch, argv)
    assert demo.validation_pooled(validation, 32, {"task.max_new_tokens": 128, "batch_size": 8}) is None
    assert not calls
    # one protocol before; this invocation's validation sweep adds the other: refused after it, kept
    (validation / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:2]))
    real_run = demo.run

    def adding(title, *argv, **kw):
        took = real_run(title, *argv, **kw)
        if "task.split=validation" in argv:
            with (validation / "results.jsonl").open("a") as f:
                f.write(json.dumps(point("g128", 128, 3, "d")) + "\n")
        return took

    monkeypatch.setattr(demo, "run", adding)
    argv += [
        "--lambdas",
        "1",
        "2",
        "--draft-lengths",
        "5",
        "--pilot",
        "4",
        "--n-examples",
        "4",
        "--budget-min",
        "600",
    ]
    with pytest.raises(SystemExit, match=r"2 protocols \(comparison groups g256, g128"):
        _main(demo, monkeypatch, argv)
    assert any("task.split=validation" in a for a in calls)
    assert not any(
        a[1] == "diversed.evaluate"
        and "sweep_mbpp" in (_value(a, "hydra.run.dir") or "")
        and _value(a, "sweep.heads")
        for a in calls
    )


def test_a_validation_run_cut_short_leaves_every_head_and_says_so(demo, tmp_path):  # noqa: F811
    """No record at a temperature (the run stopped at its budget) or none at all: every head is
    decoded, said "unread"; never a crash, never a choice that was not made."""
    heads = [tmp_path / "a" / "head", tmp_path / "b" / "head"]
    assert {t: x.how for t, x in demo.chosen_heads(tmp_path / "none", heads, [1.0]).items()} == {
        1.0: "unread"
    }
    run = tmp_path / "validation"
    run.mkdir()
    rec = {"method": "dynamic", "head": str(heads[0]), "temperature": 1.0, "mean_w": 0.3}
    (run / "results.jsonl").write_text(json.dumps(rec) + "\n")
    got = demo.chosen_heads(run, heads, [1.0, 0.1], every_at=[1.0, 0.1])
    assert got[1.0].how == "every" and got[1.0].heads == {str(heads[0]): 0.3, str(heads[1]): None}
    assert got[0.1].how == "unread" and set(got[0.1].heads) == set(map(str, heads))


def test_a_task_whose_heads_did_not_export_runs_without_diversed(demo, fake, tmp_path, monkeypatch):  # noqa: F811
    """Every head's training stopped before its export: the demo goes on without DIVERSED rows (no
    validation of heads, no dynamic point), and says that none of its heads exported."""
    import shutil

    calls, page = fake
    recorder = demo.run

    def no_export(title, *argv, **k):
        took = recorder(title, *argv, **k)
        if argv[1] == "diversed.train":
            shutil.rmtree(Path(_value(argv, "hydra.run.dir")) / "head")
        return took

    monkeypatch.setattr(demo, "run", no_export)
    argv = ["--pair", "qwen25coder", "--out", str(tmp_path / "out"), "--tasks", "mbpp", "--families"]
    argv += ["--temperatures", "1", "--draft-lengths", "5", "--pilot", "4", "--n-examples", "4"]
    argv += ["--budget-min", "600", "--docs", str(tmp_path / "docs"), "--page", str(page)]
    _main(demo, monkeypatch, argv)
    methods = [_value(a, "sweep.methods") for a in calls if a[1] == "diversed.evaluate"]
    assert methods == ["[autoregressive,lossless]", "[autoregressive,lossless,static]"]
    assert "mbpp: 0 of 3 exported" in page.read_text()


def test_a_head_is_said_with_the_objective_it_was_trained_on(demo, tmp_path):  # noqa: F811
    """The docs name each head's objective: its head_config.json's; for a head exported before the
    export wrote it, the training run's own config beside it (`.hydra/config.yaml`); REINFORCE only
    where neither says (heads trained before there was a choice)."""
    said = {}
    for name, config, run_objective in (
        ("exported", {"reg_scale": 2, "objective": "teacher_forced"}, None),
        ("older", {"reg_scale": 1}, "teacher_forced"),
        ("oldest", {"reg_scale": 0.5}, None),
    ):
        head = tmp_path / name / "head"
        head.mkdir(parents=True)
        (head / "head_config.json").write_text(json.dumps(config))
        if run_objective:
            (tmp_path / name / ".hydra").mkdir()
            (tmp_path / name / ".hydra" / "config.yaml").write_text(f"model:\n  objective: {run_objective}\n")
        said[name] = demo.head_said(str(head))
    assert said == {
        "exported": "exported (teacher_forced, λ = 2)",
        "older": "older (teacher_forced, λ = 1)",
        "oldest": "oldest (reinforce, λ = 0.5)",
    }


def test_a_second_draft_length_gets_the_static_point_at_its_own_mean_w(demo, fake, tmp_path, monkeypatch):  # noqa: F811
    """The static ensemble the report pairs a head with is at the head's mean w at the same N: an
    invocation at N = 3 into an --out whose validation run already holds N = 5 reads the heads' w at
    N = 3 only (not the mean over both lengths), and one at N = 3 and 5 decodes each length beside
    its own w (one grid call per N: a grid crosses w with N), and says both."""
    calls, page = fake
    out = tmp_path / "out"
    argv = ["--pair", "qwen25coder", "--out", str(out), "--tasks", "mbpp", "--temperatures", "1"]
    argv += ["--weights", "0.5", "--pilot", "4", "--n-examples", "4", "--budget-min", "600"]
    argv += ["--lambdas", "1", "--front-at", "1", "--docs", str(tmp_path / "docs"), "--page", str(page)]
    front = {}
    for ns in (["5"], ["3"], ["3", "5"]):
        calls.clear()
        _main(demo, monkeypatch, [*argv, "--draft-lengths", *ns])
        tests = [a for a in calls if "static" in (_value(a, "sweep.methods") or "")]
        front[" ".join(ns)] = [(_value(a, "sweep.draft_lengths"), _value(a, "sweep.weights")) for a in tests]
    # the head's w on the validation rows: 0.8 at N = 5, 0.74 at N = 3 (the mean over both: 0.77)
    assert front == {
        "5": [("[5]", "[0.5,0.8]")],
        "3": [("[3]", "[0.5,0.74]")],
        "3 5": [("[3]", "[0.5,0.74]"), ("[5]", "[0.5,0.8]")],
    }
    assert "mean w 0.740 (N = 3), 0.800 (N = 5)" in page.read_text()
