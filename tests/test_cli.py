"""The console scripts as a shell runs them: exit status 0 after success with the output printed once,
a user error as its message alone with exit status 2, a bug with its traceback, `--help` that
describes the program; and the checks that come before anything loads (bench's flags, a split the
Hub does not have, a model directory without a tokenizer)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = (
    "train",
    "evaluate",
    "likelihood",
    "plot",
    "bench",
    "toy",
    "show",
    "distill",
    "report",
    "weights",
    "drafts",
)
HYDRA = ("train", "evaluate", "likelihood", "distill")


def script(name: str) -> Path:
    path = Path(sys.executable).parent / f"diversed-{name}"
    if not path.exists():
        pytest.skip(f"{path.name} is not installed beside {sys.executable} (pip install -e .)")
    return path


def environment(**extra: str) -> dict[str, str]:
    """This tree's package first (the console scripts would import the installed one), offline."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return {**env, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}


def shell(name: str, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(script(name)), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment(**env),
        cwd=cwd or ROOT,
    )


def no_dump(err: str) -> bool:
    """Nothing on stderr that reads as a Python value printed by `sys.exit(value)`."""
    return not any(
        line.lstrip().startswith(("[{", "{'", "[PosixPath", "PosixPath(")) for line in err.splitlines()
    )


# ----------------------------------------------------------------------------- exit status 0, output once


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, toy_tiny_dir):
    """A tiny sweep's run directory (3 points, 3 examples)."""
    from tiny_models import compose_run

    from diversed.evaluate import evaluate

    out = tmp_path_factory.mktemp("cli-run")
    evaluate(
        compose_run(
            "evaluate",
            out,
            toy_tiny_dir,
            [
                "+experiment=toy",
                "task.n_examples=3",
                "task.max_new_tokens=4",
                "sweep.methods=[autoregressive,lossless,static]",
                "sweep.draft_lengths=[2]",
                "sweep.weights=[0.5]",
                "sweep.temperatures=[1.0]",
                "sweep.num_seeds=1",
                "timing.warmup=0",
                "timing.repeats=1",
                "runtime.progress=false",
            ],
        )
    )
    return out


def test_mains_return_status_0_and_print_once(run_dir, toy_tiny_dir, tmp_path, capsys):
    """Each argparse entry point's `main` is its console script (`sys.exit(main())`): 0, the output once."""
    from diversed import bench, plot, report, show
    from diversed import toy as toy_verb
    from diversed.models import toy

    assert show.main([str(run_dir), "--all", "--n", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("== example") == 1 and out.count(f"{run_dir}: 3 points") == 1
    assert plot.main([str(run_dir), "--out", str(tmp_path / "plots"), "--formats", "png"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed and len(printed) == len(set(printed)) and all(Path(p).is_file() for p in printed)
    assert (
        report.main([str(run_dir), "--out", str(tmp_path / "report"), "--formats", "png", "--examples", "1"])
        == 0
    )
    assert capsys.readouterr().out.split() == [str(tmp_path / "report" / "README.md")]
    cached = toy.pair_dir(toy.ToyBuildConfig.tiny(), tmp_path / "cache")  # as the cache keeps it: no build
    shutil.copytree(toy_tiny_dir, cached)
    assert toy_verb.main(["--tiny", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().out.split() == [str(cached)]
    assert (
        bench.main(
            [
                "--target",
                str(cached / "target"),
                "--draft",
                str(cached / "draft"),
                "-N",
                "2",
                "--batch-sizes",
                "1",
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "3",
                "--repeats",
                "1",
                "--warmup",
                "0",
                "--only",
                "diversed static",
            ]
        )
        == 0
    )
    said = capsys.readouterr()
    assert said.out.count("tok/s") == 1 and "'engine'" not in said.out + said.err


def test_console_scripts_exit_0_and_user_errors_2(run_dir, tmp_path):
    """As a shell runs them: the installed scripts, this tree's package."""
    done = shell("show", str(run_dir), "--n", "1")
    assert done.returncode == 0 and done.stdout.count(f"{run_dir}: 3 points") == 1 and no_dump(done.stderr)
    for name in ("weights", "drafts"):
        assert shell(name, "--help").returncode == 0
    empty = shell("show", str(tmp_path))
    assert empty.returncode == 2 and empty.stderr.startswith("error: ") and "no run records" in empty.stderr
    weights = shell("weights", "convert", str(tmp_path / "missing.gguf"))
    assert (
        weights.returncode == 2 and "does not exist" in weights.stderr and "Traceback" not in weights.stderr
    )


@pytest.mark.slow
def test_every_console_script_runs_from_the_shell(run_dir, toy_tiny_dir, tmp_path):
    """All eleven scripts' --help, and show, plot, report, toy and bench on tiny inputs, as subprocesses."""
    names = [script(n) for n in SCRIPTS]
    running = [
        subprocess.Popen(
            [str(p), "--help"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
            cwd=ROOT,
        )
        for p in names
    ]
    for name, proc in zip(SCRIPTS, running, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and ("usage" in out.lower()), (name, err[-2000:])
        if name in HYDRA:
            assert f"python -m diversed.{name} +experiment=" in out and "hydra/launcher" not in out, out[
                :1500
            ]
    train = next(p for n, p in zip(SCRIPTS, running, strict=True) if n == "train")
    assert train.returncode == 0
    runs = {
        "plot": [str(run_dir), "--out", str(tmp_path / "plots"), "--formats", "png"],
        "report": [str(run_dir), "--out", str(tmp_path / "report"), "--formats", "png"],
        "bench": [
            "--target",
            str(toy_tiny_dir / "target"),
            "--draft",
            str(toy_tiny_dir / "draft"),
            "-N",
            "2",
            "--batch-sizes",
            "1",
            "--num-prompts",
            "2",
            "--max-new-tokens",
            "3",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--only",
            "diversed static",
        ],
    }
    for name, args in runs.items():
        done = shell(name, *args)
        assert done.returncode == 0 and no_dump(done.stderr), (name, done.stderr[-2000:])
        lines = done.stdout.splitlines()
        assert lines and len([x for x in lines if x.strip()]) == len({x for x in lines if x.strip()}), name


# ------------------------------------------------------------------------- user errors: exit status 2, --help


def test_hydra_help_describes_the_program_and_its_own_groups():
    out = shell("evaluate", "+experiment=toy", "--help").stdout
    assert out.startswith("python -m diversed.evaluate (diversed-evaluate): The evaluation grid")
    assert "sweep.methods" in out and "python -m diversed.evaluate +experiment=toy" in out
    groups = out.split("== Config groups")[1].split("== Config (")[0]
    assert (
        "+experiment: " in groups and "toy (in use)" in groups and "pair: " in groups and "task: " in groups
    )
    assert "head:" not in groups and "trainer:" not in groups  # train's groups, not evaluate's
    assert "powered by Hydra" not in out and "hydra/launcher" not in out and "paper_sampling" not in out


@pytest.mark.slow
def test_a_bad_setting_is_its_message_alone_with_status_2():
    done = shell("evaluate", "+experiment=toy", "sweep.draft_lengths=[0]", "hydra.run.dir=/nonexistent/never")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "sweep.draft_lengths[0]=0" in done.stderr and done.stderr.startswith("error: bad settings")
    assert "Traceback" not in done.stderr and "Error executing job" not in done.stderr


def test_hydra_task_lets_bugs_through_and_stops_user_errors(capsys, monkeypatch):
    from omegaconf import OmegaConf

    from diversed.errors import ConfigError, hydra_task

    def job(cfg):
        raise (ConfigError("sweep.x=1: give 2") if cfg.user else ZeroDivisionError("a bug"))

    with pytest.raises(SystemExit) as stop:
        hydra_task(job)(OmegaConf.create({"user": True}))
    assert stop.value.code == 2 and capsys.readouterr().err == "error: sweep.x=1: give 2\n"
    with pytest.raises(ZeroDivisionError):  # a bug: Hydra's report, traceback and all
        hydra_task(job)(OmegaConf.create({"user": False}))
    with pytest.raises(ConfigError):  # asked for: the traceback of a user error too
        hydra_task(job)(OmegaConf.create({"user": True, "runtime": {"verbose": True}}))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(ConfigError):
        hydra_task(job)(OmegaConf.create({"user": True}))


@pytest.mark.slow
def test_a_bug_keeps_its_traceback_from_the_shell(tmp_path):
    """A task function that fails on its own (not a user error) shows Hydra's traceback, exit 1."""
    (tmp_path / "sitecustomize.py").write_text(  # the bug: describe_pair fails inside the job
        "import diversed.models.pair as p\n"
        "def broken(cfg):\n    raise ZeroDivisionError('a bug')\n"
        "p.describe_pair = broken\n"
    )
    done = shell(
        "evaluate",
        "+experiment=toy",
        "sweep.methods=[autoregressive]",
        f"hydra.run.dir={tmp_path / 'run'}",
        PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}",
    )
    assert done.returncode == 1 and "Traceback" in done.stderr and "ZeroDivisionError: a bug" in done.stderr
    full = shell(
        "evaluate",
        "+experiment=toy",
        "sweep.draft_lengths=[0]",
        "hydra.run.dir=/nonexistent/never",
        HYDRA_FULL_ERROR="1",
    )
    assert full.returncode == 1 and "Traceback" in full.stderr and "ConfigError" in full.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["-N", "0"], "-N/--num-draft-tokens must be at least 1"),
        (["--batch-sizes", "1", "0"], "--batch-sizes"),
        (["--repeats", "0"], "--repeats"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--warmup", "-1"], "--warmup"),
        (["--temperature", "-1"], "--temperature must be >= 0"),
        (["--top-k", "-1"], "--top-k"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--weight", "1.0"], "--weight"),
    ],
)
def test_bench_checks_its_flags_before_loading(tmp_path, flags, named, monkeypatch, capsys):
    from diversed import bench
    from diversed.errors import ConfigError

    monkeypatch.setattr(bench, "load_bench_pair", lambda config: pytest.fail("the pair was loaded"))
    with pytest.raises(ConfigError, match=re.escape(named)):
        bench.run(["--target", str(tmp_path), "--draft", str(tmp_path), *flags])
    assert bench.main(["--target", str(tmp_path), "--draft", str(tmp_path), *flags]) == 2
    assert named in capsys.readouterr().err


# ----------------------------------------------------------------------------- two messages


def test_a_split_the_hub_does_not_have_is_named_before_the_network(monkeypatch):
    from diversed.errors import ConfigError
    from diversed.models import hub
    from diversed.tasks import load_task

    monkeypatch.setattr(hub, "probe", lambda *a, **k: pytest.fail("the network was tried"))
    with pytest.raises(
        ConfigError,
        match=r"no 'validation' split on the Hugging Face Hub, only train, test.*"
        r"task.split=test.*data.val_split=holdout.*task.data_files",
    ):
        load_task("gsm8k", split="validation")


def test_a_draft_without_tokenizer_files_is_named(tmp_path, toy_tiny_dir):
    from diversed.errors import MissingFile
    from diversed.models.pair import describe_pair, load_pair

    draft = tmp_path / "draft"
    shutil.copytree(toy_tiny_dir / "draft", draft, ignore=shutil.ignore_patterns("tokenizer*"))
    target = str(toy_tiny_dir / "target")
    with pytest.raises(MissingFile, match=r"the draft directory .* has no tokenizer files.*save_pretrained"):
        describe_pair({"_target_": "diversed.models.pair.load_pair", "target": target, "draft": str(draft)})
    with pytest.raises(MissingFile, match="has no tokenizer files"):
        load_pair(target, str(draft), device="cpu", dtype="float32")
