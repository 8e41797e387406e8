"""What a new user types wrong is refused before any weights load, each message naming its fix; a
refused run leaves no folder (and a folder that existed as it was); a Ctrl-C is one line saying what
was saved and how to resume (exit status 130), and the command it names resumes. The entry points run
as Hydra runs them (`main` with a command line), on the toy pair."""

from __future__ import annotations

import importlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from diversed import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["hydra/hydra_logging=disabled"]  # the job's own log file stays: a refusal must remove it


@pytest.fixture
def no_weights(monkeypatch):
    """Any model weights read fail the test."""
    from transformers import PreTrainedModel

    def refuse(*args, **kwargs):
        raise AssertionError("model weights were read")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


@pytest.fixture
def main(monkeypatch, tmp_path, capsys):
    """`main("train", *args)`: python -m diversed.train *args in `tmp_path` (in this process): its exit
    status and its stderr."""
    monkeypatch.chdir(tmp_path)

    def run(entry: str, *args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", [entry, *args, *QUIET])
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        disabled = {
            n: g.disabled for n, g in logging.Logger.manager.loggerDict.items() if hasattr(g, "disabled")
        }
        capsys.readouterr()
        try:
            importlib.import_module(f"diversed.{entry}").main()
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        finally:
            GlobalHydra.instance().clear()
            for h in root.handlers:
                if h not in handlers:
                    h.close()
            root.setLevel(level)
            root.handlers[:] = handlers
            for name, g in logging.Logger.manager.loggerDict.items():
                if hasattr(g, "disabled"):
                    g.disabled = disabled.get(name, False)
        return status, capsys.readouterr().err

    return run


def composed(entry: str, *overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(entry, overrides=list(overrides))


def tree(path: Path) -> dict[str, bytes | None]:
    """Every entry under `path` with a file's bytes (None: a directory)."""
    return {str(p.relative_to(path)): None if p.is_dir() else p.read_bytes() for p in sorted(path.rglob("*"))}


# ----------------------------------------------------------------------------- the trainer, before all


def _cases() -> list[tuple[str, str]]:
    import torch

    gpu = torch.cuda.is_available()
    cases = [
        ("trainer.precision=17", "set trainer.precision=32-true"),
        ("trainer.strategy=dp", "set trainer.strategy=auto"),
        ("trainer.devices=0", "set trainer.devices=1"),
    ]
    if not gpu:
        cases += [
            (
                "trainer.accelerator=gpu",
                "trainer.accelerator='gpu': torch sees no GPU on this machine: set "
                "trainer.accelerator=cpu (or auto)",
            ),
            (
                "trainer.precision=16",
                "trainer.precision=16: 16-bit floats are for GPUs; on this CPU Lightning "
                "would run bf16-mixed instead: set trainer.precision=32-true",
            ),
        ]
        from diversed.training.trainer import _cores

        if _cores() < 4:
            cases.append(
                ("trainer.devices=4", "starts 4 training processes, each with its own copy of the pair")
            )
    return cases


@pytest.mark.parametrize("entry", ["train", "distill"])
@pytest.mark.parametrize(("setting", "said"), _cases())
def test_a_trainer_setting_this_machine_cannot_run_is_refused_before_anything_loads(
    main, tmp_path, no_weights, monkeypatch, entry, setting, said
):
    import diversed.training.trainer as runtime

    module = importlib.import_module(f"diversed.{entry}")
    monkeypatch.setattr(module, "prepare_training", lambda *a, **k: pytest.fail("data or pair loaded"))
    experiment = "+experiment=toy" if entry == "train" else "+experiment=distill_toy"
    status, err = main(entry, experiment, setting)
    assert status == 2, err
    assert err.startswith(f"error: bad settings for diversed.{entry}, nothing was loaded:\n  ")
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 2, err
    assert not (tmp_path / "outputs").exists()  # the refused run left no folder
    fix = re.search(r"set (trainer\.\w+=\S+)", err).group(1)  # the fix it names, followed, is accepted
    runtime.check_trainer(composed(entry, experiment, setting, fix), f"diversed.{entry}")


def test_a_gpu_preset_on_a_cpu_machine_names_the_accelerator(monkeypatch):
    import diversed.training.trainer as runtime
    from diversed.errors import ConfigError

    monkeypatch.setattr(runtime, "_gpus", lambda: 0)
    monkeypatch.setattr(runtime, "_lightning", lambda flags: RuntimeError("No supported gpu backend found!"))
    with pytest.raises(
        ConfigError, match=r"trainer\.accelerator='gpu': torch sees no GPU.*trainer\.accelerator=cpu"
    ):
        runtime.check_trainer(composed("train", "+paper=gsm8k"), "diversed.train")


def test_more_gpus_than_the_machine_has_names_how_many_it_has(monkeypatch):
    """As Lightning refuses it on a one-GPU machine (mocked: the refusal and the count)."""
    import diversed.training.trainer as runtime
    from diversed.errors import ConfigError

    def lightning(flags):
        if flags.get("devices") == 4:
            return RuntimeError("You requested gpu: [0, 1, 2, 3]\n But your machine only has: [0]")
        return object()

    monkeypatch.setattr(runtime, "_gpus", lambda: 1)
    monkeypatch.setattr(runtime, "_lightning", lightning)
    with pytest.raises(ConfigError) as err:
        runtime.check_trainer(composed("train", "+paper=gsm8k", "trainer.devices=4"), "diversed.train")
    assert str(err.value).endswith(
        "  trainer.devices=4: You requested gpu: [0, 1, 2, 3] But your machine only has: [0]: set "
        "trainer.devices=1 (this machine has 1 GPU)"
    )


# ----------------------------------------------------------------------------- hints that lead somewhere


def _exists(group: str, option: str) -> bool:
    return (Path(CONFIG_DIR) / group / f"{option}.yaml").is_file()


def follow(entry: str, overrides: list[str]) -> list[str]:
    """Follow each hint of the refusals from `overrides` until the settings pass; every config group
    option a message names must exist. Returns the messages seen."""
    from diversed.evaluate import check_evaluate
    from diversed.train import check_train

    check = check_evaluate if entry == "evaluate" else check_train
    seen = []
    for _ in range(6):
        try:
            check(composed(entry, *overrides))
            return seen
        except ValueError as e:
            message = str(e)
        seen.append(message)
        for group, option in re.findall(r"\+?(\w+)=(\w+)\? \(config group", message) + re.findall(
            r"use \+(paper)=(\w+) in place", message
        ):
            assert _exists(group, option), message
        for group, options in re.findall(r"config group (\w+): ([\w, ]+)\)", message):
            assert all(_exists(group, o) for o in options.split(", ")), message
        if hint := re.search(
            r"  (\w+)=\S+: unknown key; did you mean (\+?)(\w+)=(\S+)\? \(config group \w+: (\w+)", message
        ):
            typed, plus, group, choice, first = hint.groups()
            choice = first if choice == "<option>" else choice
            overrides = [o for o in overrides if o.lstrip("+").split("=")[0] != typed] + [
                f"{plus}{group}={choice}"
            ]
        elif drop := re.search(r"drop (\+paper=\w+) to run", message):
            overrides = [
                o for o in overrides if o not in (drop.group(1), f"+paper_preset={drop.group(1)[7:]}")
            ]
        elif use := re.search(r"use (\+paper=\w+) in place of", message):
            overrides = [o for o in overrides if not o.startswith(("task=", "+paper="))] + [use.group(1)]
        else:
            pytest.fail(f"no hint to follow: {message}")
    pytest.fail(f"hints go round: {seen}")


@pytest.mark.parametrize(
    "overrides",
    [
        ["+experiment=toy", "+preset=gsm8k"],
        ["+experiment=toy", "+paper_preset=gsm8k"],
        ["+paper=gsm8k", "+experiment=toy"],
        ["+paper=gsm8k", "task=xsum"],
        ["+experiments=toy"],
        ["+experiment=toy", "+pairs=toy"],
    ],
)
@pytest.mark.parametrize("entry", ["evaluate", "train"])
def test_each_hint_followed_leads_to_settings_that_pass(entry, overrides):
    seen = follow(entry, overrides)
    assert seen and not any("+paper=toy" in m for m in seen), seen  # (no configs/paper/toy.yaml)


def test_a_group_name_mistyped_is_pointed_at_the_group_and_its_options():
    from diversed.errors import ConfigError
    from diversed.evaluate import check_evaluate
    from diversed.train import check_train

    with pytest.raises(ConfigError) as err:
        check_evaluate(composed("evaluate", "+experiment=toy", "+preset=gsm8k"))
    assert (
        "preset='gsm8k': unknown key; did you mean +paper=gsm8k? "
        "(config group paper: cnndm, gsm8k, mbpp, xsum)" in str(err.value)
    )
    with pytest.raises(
        ConfigError,
        match=r"has no paper protocol \(config group paper: cnndm, gsm8k, mbpp, xsum\): drop \+paper=gsm8k",
    ):
        check_evaluate(composed("evaluate", "+paper=gsm8k", "+experiment=toy"))
    with pytest.raises(ConfigError) as err:  # a Lightning 1.x argument: what replaces it
        check_train(composed("train", "+experiment=toy", "+trainer.gpus=2"))
    assert (
        "trainer.gpus=2: unknown key; Lightning 2 has no gpus: set trainer.accelerator=gpu "
        "trainer.devices=2 instead" in str(err.value)
    )


# ----------------------------------------------------------------------------- heads


@pytest.fixture
def saved_run(tmp_path):
    """A train run's folder whose head/ holds a head that fits the toy pair."""
    from diversed import WeightHead
    from diversed.models.heads import pair_record
    from diversed.models.pair import describe_pair

    card = describe_pair(composed("evaluate", "+experiment=toy").pair)
    run = tmp_path / "outputs" / "toy" / "2026-01-01_00-00-00"
    WeightHead(card.hidden["draft"], card.hidden["target"]).save_pretrained(
        run / "head", pair=card.name, pair_identity=pair_record(card.identity), task="toy"
    )
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    return run


def test_a_train_run_folder_given_as_a_head_points_to_its_head(main, saved_run, tmp_path, no_weights):
    run = saved_run.relative_to(tmp_path)
    before = tree(tmp_path)
    common = ["+experiment=toy", "sweep.methods=[dynamic]", "hydra.run.dir=ev"]
    for given in (run, run / "checkpoints" / "last.ckpt"):
        status, err = main("evaluate", *common, f"sweep.heads=[{given}]")
        assert status == 2 and f"did you mean {run}/head (the head it exported)?" in err, err
        assert f"sweep.heads=[{run}/head]" in err and len(err.strip().splitlines()) == 1
        assert tree(tmp_path) == before  # no run folder left, the train run untouched
    status, err = main("evaluate", *common, "sweep.heads=[no/such/head]")
    assert (
        status == 2
        and "sweep.heads entry no/such/head is not a saved head: there is no such directory" in err
    )
    assert tree(tmp_path) == before
    # the fix followed: the head is accepted (a dry run lists the points; nothing loads)
    status, err = main("evaluate", *common, f"sweep.heads=[{run}/head]", "sweep.dry_run=true")
    assert status == 0, err


# ----------------------------------------------------------------------------- a refused run leaves no folder


def test_a_refused_run_leaves_no_folder_and_an_existing_one_as_it_was(main, tmp_path, no_weights):
    for entry, args, said in (
        ("evaluate", ["+experiment=toy", "sweep.methods=[dynamicc]"], "dynamicc"),  # a check of the settings
        ("evaluate", ["+experiment=toy", "sweep.methods=[dynamic]", "sweep.heads=[nope]"], "nope"),  # locked
        ("train", ["+experiment=toy", "model.reg_scale=-1"], "model.reg_scale=-1"),
        ("distill", ["+experiment=distill_toy", "trainer.precision=17"], "trainer.precision=17"),
        # with its traceback (Hydra's report, exit status 1): refused all the same
        ("evaluate", ["+experiment=toy", "sweep.methods=[dynamicc]", "runtime.verbose=true"], "dynamicc"),
    ):
        status, err = main(entry, *args)
        assert status == (1 if "runtime.verbose=true" in args else 2) and said in err, err
        assert list(tmp_path.iterdir()) == [], (entry, args, list(tmp_path.rglob("*")))
    # a run folder that existed (a sweep re-run on it, a training resumed in it): never removed, as it was
    old = tmp_path / "outputs" / "evaluate" / "toy" / "toy" / "toy"
    (old / ".hydra").mkdir(parents=True)
    (old / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (old / "evaluate.log").write_text("the first run's log\n")
    (old / "results.jsonl").write_text("")
    (old / "examples").mkdir()
    before = tree(tmp_path)
    for args in (["sweep.methods=[dynamicc]"], ["sweep.methods=[dynamic]", "sweep.heads=[nope]"]):
        assert main("evaluate", "+experiment=toy", *args)[0] == 2
        assert tree(tmp_path) == before
    # refused because another process writes there: its folder, log and results are left to it
    from diversed.files.rundir import hold

    with hold(old):
        status, err = main("evaluate", "+experiment=toy", "sweep.methods=[autoregressive]")
        assert status == 2 and "is being written by another process" in err, err
        assert (old / "evaluate.log").read_text().startswith("the first run's log\n")
        assert {
            k: v for k, v in tree(tmp_path).items() if k in before and ".hydra" not in k and ".log" not in k
        } == {k: v for k, v in before.items() if ".hydra" not in k and ".log" not in k}


def test_what_a_stopped_run_wrote_is_never_undone(tmp_path):
    """A user error after the run wrote something: a folder it made stays whole, and in one that existed
    Hydra's copies and the log stay as the run left them."""
    from diversed.config.jobs import _Before, undo_refused

    made = tmp_path / "made"
    before = _Before(made)
    (made / ".hydra").mkdir(parents=True)
    (made / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (made / "results.jsonl").write_text("{}\n")
    undo_refused(before)
    assert tree(made) == {".hydra": None, ".hydra/config.yaml": b"seed: 1\n", "results.jsonl": b"{}\n"}
    old = tmp_path / "old"
    (old / ".hydra").mkdir(parents=True)
    (old / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (old / "results.jsonl").write_text("")
    before = _Before(old)
    time.sleep(0.01)
    (old / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (old / "results.jsonl").write_text("{}\n")
    undo_refused(before)
    assert (old / ".hydra" / "config.yaml").read_text() == "seed: 1\n"


def test_a_refused_multirun_leaves_no_folder():
    """Each job's folder, then the sweep's (Hydra's multirun.yaml) when the process ends."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "diversed.evaluate",
                "-m",
                "+experiment=toy",
                "sweep.methods=[dynamicc]",
                "seed=0,1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        )
        assert done.returncode == 1 and "dynamicc" in done.stderr, done.stderr[-2000:]
        assert list(Path(tmp).iterdir()) == []


# ----------------------------------------------------------------------------- Ctrl-C: one line, resumable


def test_ctrl_c_outside_any_saving_block_is_one_line(capsys):
    from diversed.errors import cli, on_interrupt

    def stopped(argv):
        raise KeyboardInterrupt

    assert cli(stopped) == 130
    assert capsys.readouterr().err == "interrupted: stopped by Ctrl-C before it finished\n"

    def saving(argv):
        with (
            on_interrupt(lambda: "outer"),
            on_interrupt(lambda: "3 points are saved; the same command resumes"),
        ):
            raise KeyboardInterrupt

    assert cli(saving) == 130
    assert capsys.readouterr().err == "interrupted: 3 points are saved; the same command resumes\n"


def test_ctrl_c_in_training_names_the_checkpoint_and_the_command_resumes(main, tmp_path, monkeypatch):
    import torch

    from diversed.training.checkpoints import StepSeeds

    first = StepSeeds.on_train_batch_start

    def ctrl_c_at_step_3(self, trainer, *args):
        if trainer.global_step == 3 and not getattr(self, "resumed", False):
            raise KeyboardInterrupt  # as a Ctrl-C mid-step: Lightning's own handling, then ours
        return first(self, trainer, *args)

    monkeypatch.setattr(StepSeeds, "on_train_batch_start", ctrl_c_at_step_3)
    args = [
        "+experiment=toy",
        "hydra.run.dir=run",
        "logger=csv",
        "trainer.max_steps=5",
        "trainer.val_check_interval=5",
        "trainer.enable_progress_bar=false",
        "callbacks.last_checkpoint.every_n_train_steps=2",
        "data.batch_size=4",
        "data.n_train=32",
        "data.n_val=8",
        "data.val_batch_size=8",
        "model.max_new_tokens=8",
    ]
    handler = signal.getsignal(signal.SIGINT)
    try:
        status, err = main("train", *args)
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores a second Ctrl-C while it shuts down
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert status == 130 and err == (
        f"interrupted: at step 3 of 5; the latest checkpoint is {last} (step 2): the same command with "
        f"ckpt_path={last} resumes\n"
    ), err
    monkeypatch.setattr(StepSeeds, "resumed", True, raising=False)
    status, err = main("train", *args, f"ckpt_path={last}")
    assert status == 0, err
    assert f"Resuming in place from {last}" in (tmp_path / "run" / "train.log").read_text()
    assert (tmp_path / "run" / "head" / "head_config.json").is_file()
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 5


@pytest.mark.slow
def test_ctrl_c_in_evaluate_says_what_is_saved_and_the_same_command_resumes(tmp_path):
    """SIGINT once the first grid point is written; the same command then runs the others only."""
    run = tmp_path / "ev"
    command = [
        sys.executable,
        "-m",
        "diversed.evaluate",
        "+experiment=toy",
        "task.n_examples=8",
        "sweep.methods=[autoregressive,lossless,static]",
        "sweep.draft_lengths=[2]",
        "sweep.weights=[0.5,0.7]",
        "sweep.temperatures=[1.0]",
        "sweep.num_seeds=1",
        "timing.warmup=0",
        "timing.repeats=1",
        "runtime.progress=false",
        f"hydra.run.dir={run}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    results = run / "results.jsonl"
    deadline = time.monotonic() + 240
    while not (results.exists() and results.read_text().count("\n") >= 1) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    saved = results.read_text().count("\n")
    assert proc.returncode == 130 and 1 <= saved < 4, err[-2000:]
    assert err.strip().splitlines() == [
        f"interrupted: {saved} grid point{'s are' if saved != 1 else ' is'} saved in {run}; the same command "
        "resumes (it skips the saved points)"
    ], err[-2000:]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"4 grid points, {saved} already done" in done.stdout + done.stderr
    assert results.read_text().count("\n") == 4
