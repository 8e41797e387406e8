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
            (head / "head_config.json").write_text("{}")
        elif module == "diversed.evaluate":
            run_dir = Path(_value(argv, "hydra.run.dir"))
            run_dir.mkdir(parents=True, exist_ok=True)
            n = int(_value(argv, "task.n_examples"))
            methods = _value(argv, "sweep.methods").strip("[]").split(",")
            with (run_dir / "results.jsonl").open("a") as f:
                for m in methods:
                    rec = {"method": m, "n_examples": n, "scored_wall_time_s": 2.0 * n, "mean_w": 0.8}
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
    common += ["--page", str(page)]
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
        ("diversed.evaluate", "mbpp", "[autoregressive,lossless,static,dynamic]", "[1,0.1]"),
        ("diversed.evaluate", "mbpp", "[lossy,typical]", "[1]"),  # the families at --families-at only
        ("diversed.report", None, None, None),
    ]
    assert _value(calls[4], "hydra.run.dir") == _value(calls[5], "hydra.run.dir")  # one run: resumed
    # the static front: --weights and the head's validation mean w, on the test rows
    assert _value(calls[4], "sweep.weights") == "[0.5,0.8]" and _value(calls[4], "task.split") is None
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
