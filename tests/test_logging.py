"""How the entry points log and where their jobs write: the one default logger, wandb's Table and
groups, the resolved config, the progress bar, DDP's process count, resuming in place, multirun
job names and the warning for jobs timed side by side."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import hydra
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from tiny_models import compose_run, pair_overrides

from diversed import CONFIG_DIR
from diversed.config import runtime
from diversed.errors import ConfigError
from diversed.train import check_train
from diversed.training.trainer import progress_bar

# ----------------------------------------------------------------------------- the default logger


def composed(config_name: str, *overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name, overrides=list(overrides))


@pytest.mark.parametrize("entry", ["train", "distill", "evaluate"])
def test_every_entry_point_logs_csv_by_default_and_wandb_offline_and_silent_when_asked(entry):
    assert list(composed(entry).logger) == ["csv"]
    wandb = composed(entry, "logger=wandb").logger
    assert sorted(wandb) == ["csv", "wandb"]
    assert (
        wandb.wandb.offline is True
        and wandb.wandb.settings.silent is True
        and wandb.wandb.settings.console == "off"
    )


def test_the_resolved_config_is_logged(caplog):
    cfg = OmegaConf.create(
        {"task_name": "toy", "model": {"name": "${task_name}-head"}, "later": "${hydra:runtime.output_dir}"}
    )
    with caplog.at_level(logging.INFO, logger="diversed.config.runtime"):
        runtime.show_config(cfg)
    assert "name: toy-head" in caplog.text  # resolved
    assert "${hydra:runtime.output_dir}" in caplog.text  # what cannot be resolved here is shown as written


def test_the_progress_bar_reads_steps_when_training_runs_by_steps():
    bar = progress_bar()
    bar._trainer = SimpleNamespace(max_epochs=-1, max_steps=200, global_step=26, num_training_batches=13)
    assert (
        bar._get_train_description(2).strip() == "Epoch 2 · steps 27-39 of 200"
    )  # Lightning's: "Epoch 2/-2"
    bar._trainer = SimpleNamespace(max_epochs=5, max_steps=-1, global_step=26, num_training_batches=13)
    assert bar._get_train_description(2).strip() == "Epoch 2/4"


# ----------------------------------------------------------------------------- DDP


def test_ddp_with_one_process_is_refused_and_the_toy_experiment_runs_ddp_on_cpu():
    """An experiment's trainer.devices: 1 wins over trainer=ddp's devices (it is applied after the
    trainer group): one process, silently. Training refuses it and says what to set."""
    with pytest.raises(ConfigError, match=r"runs one process.*trainer\.devices=N.*trainer\.accelerator=cpu"):
        check_train(composed("train", "+experiment=llama8b_1b", "trainer=ddp"))
    check_train(composed("train", "+experiment=llama8b_1b", "trainer=ddp", "trainer.devices=8"))
    toy = composed("train", "+experiment=toy", "trainer=ddp", "trainer.devices=2")  # the toy sets no devices
    assert (toy.trainer.strategy, toy.trainer.accelerator, toy.trainer.devices) == ("ddp", "cpu", 2)
    assert composed("train", "+experiment=toy").trainer.devices == "auto"  # one CPU process
    check_train(toy)


# ----------------------------------------------------------------------------- where jobs write


@pytest.fixture
def run_hydra(monkeypatch, tmp_path):
    """Run `config_name` through hydra.main with the command line `args` and a task function that
    only records where each job writes (no models): [(hydra's output dir, paths.output_dir), ...]."""
    monkeypatch.chdir(tmp_path)

    def run(config_name: str, *args: str) -> list[tuple[Path, Path]]:
        seen = []

        def task(cfg):
            from hydra.core.hydra_config import HydraConfig

            seen.append((Path(HydraConfig.get().runtime.output_dir), Path(cfg.paths.output_dir)))

        quiet = ["hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
        monkeypatch.setattr(sys, "argv", ["prog", *args, *quiet])
        # Hydra configures logging (dictConfig disables the loggers that exist): put it back after
        root = logging.getLogger()
        state = (
            root.level,
            list(root.handlers),
            {
                n: g.disabled
                for n, g in logging.Logger.manager.loggerDict.items()
                if isinstance(g, logging.Logger)
            },
        )
        try:
            hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name=config_name)(task)()
        finally:
            GlobalHydra.instance().clear()
            root.setLevel(state[0])
            root.handlers[:] = state[1]
            for name, g in logging.Logger.manager.loggerDict.items():
                if isinstance(g, logging.Logger):
                    g.disabled = state[2].get(name, False)
        return seen

    return run


def test_a_run_resumed_from_its_checkpoint_writes_to_its_own_directory(run_hydra, tmp_path):
    run = tmp_path / "outputs" / "toy" / "2026-01-01_00-00-00"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("the first run's config\n")
    [(out, output_dir)] = run_hydra("train", "+experiment=toy", f"ckpt_path={run}/checkpoints/last.ckpt")
    assert out.resolve() == output_dir.resolve() == run.resolve()
    assert (run / ".hydra" / "config.yaml").read_text() == "the first run's config\n"  # kept
    assert len(list((run / ".hydra").glob("resumed_*/config.yaml"))) == 1  # the resumed run's beside it
    # a checkpoint outside <run>/checkpoints/: a new directory, as without one
    (tmp_path / "loose.ckpt").write_bytes(b"")
    [(out, output_dir)] = run_hydra("train", "+experiment=toy", f"ckpt_path={tmp_path}/loose.ckpt")
    assert (
        out == output_dir and out.parent.resolve() == run.parent.resolve() and out.resolve() != run.resolve()
    )


LONG = [
    "sweep.methods=[autoregressive,lossless,static,dynamic,lossy,cascade,typical]",
    "task.n_examples=4",
    "sweep.weights=[0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0]",
    "sweep.lenience=[0.1,0.3,0.5,0.7,0.9]",
]


def test_multirun_jobs_are_named_by_the_swept_overrides(run_hydra, tmp_path):
    """Hydra's override_dirname of all overrides, cut at 120 characters, cut off the swept part
    (`seed=...` sorts after `sweep.*`): every job's directory read the same but for a digest."""
    sweep = tmp_path / "sweep"
    seen = run_hydra(
        "evaluate",
        "-m",
        "+experiment=toy",
        *LONG,
        "seed=0,1",
        "task=toy,toy_count",
        f"hydra.sweep.dir={sweep}",
    )
    names = sorted(out.relative_to(sweep).as_posix() for out, _ in seen)
    assert names == ["seed=0,task=toy", "seed=0,task=toy_count", "seed=1,task=toy", "seed=1,task=toy_count"]
    assert all(out == output_dir for out, output_dir in seen)
    # the same command: the same directories (a sweep re-run resumes); range() and paths are sweeps too
    again = run_hydra(
        "evaluate",
        "-m",
        "+experiment=toy",
        *LONG,
        "seed=0,1",
        "task=toy,toy_count",
        f"hydra.sweep.dir={sweep}",
    )
    assert sorted(out for out, _ in again) == sorted(out for out, _ in seen)
    seen = run_hydra(
        "evaluate",
        "-m",
        "+experiment=toy",
        "seed=range(2)",
        "pair=local",
        "pair.name=mine",
        "pair.draft=/d",
        "pair.target=/a/t,/b/t",
        f"hydra.sweep.dir={sweep}",
    )
    assert sorted(out.relative_to(sweep).as_posix() for out, _ in seen) == [
        "pair.target=_a_t,seed=0",
        "pair.target=_a_t,seed=1",
        "pair.target=_b_t,seed=0",
        "pair.target=_b_t,seed=1",
    ]


@pytest.mark.slow
def test_resuming_a_real_run_continues_in_its_directory(tmp_path, toy_tiny_dir):
    small = [
        "+experiment=toy",
        "trainer.val_check_interval=2",
        "data.n_val=4",
        "data.n_train=16",
        "data.batch_size=4",
        "model.max_new_tokens=6",
        "trainer.enable_progress_bar=false",
        *pair_overrides(toy_tiny_dir),
    ]
    cmd = [sys.executable, "-m", "diversed.train", *small]
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }  # this tree's diversed, from tmp_path
    subprocess.run([*cmd, "trainer.max_steps=2"], check=True, timeout=600, cwd=tmp_path, env=env)
    (run,) = (tmp_path / "outputs" / "toy").iterdir()
    last = run / "checkpoints" / "last.ckpt"
    subprocess.run(
        [*cmd, "trainer.max_steps=4", f"ckpt_path={last}"], check=True, timeout=600, cwd=tmp_path, env=env
    )
    assert list((tmp_path / "outputs" / "toy").iterdir()) == [run]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 4
    assert sorted(p.name for p in (run / "csv").iterdir()) == ["version_0", "version_1"]


# ----------------------------------------------------------------------------- evaluate's records


def small_eval(out: Path, pair_dir: Path, *overrides: str):
    base = [
        "+experiment=toy",
        "task.n_examples=4",
        "task.max_new_tokens=4",
        "sweep.batch_size=4",
        "sweep.draft_lengths=[2]",
        "sweep.weights=[0.5]",
        "sweep.temperatures=[1.0]",
        "sweep.methods=[autoregressive,lossless,static]",
        "sweep.num_seeds=1",
        "timing.warmup=0",
        "timing.repeats=1",
        "runtime.progress=false",
    ]
    return compose_run("evaluate", out, pair_dir, base, overrides)


def test_evaluate_logs_each_point_as_a_wandb_table_row_and_a_csv_row(tmp_path, toy_tiny_dir, monkeypatch):
    """Grid points are not steps of one chart: each is a row of the Table `points` with its settings,
    written as it finishes (offline here: the increments are files of the run)."""
    import diversed.evaluate as ev

    monkeypatch.setenv("WANDB_MODE", "offline")
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "logger=wandb"))
    increments = sorted(tmp_path.glob("wandb/offline-run-*/files/media/table/points_*.table.json"))
    rows = [row for f in increments for row in json.loads(f.read_text())["data"]]
    columns = json.loads(increments[0].read_text())["columns"]
    assert len(increments) == len(rows) == 3  # one increment per point, as it finished
    got = {(r[columns.index("method")], r[columns.index("weight")]) for r in rows}
    assert got == {("autoregressive", None), ("lossless", None), ("static", 0.5)}
    assert all(r[columns.index("score")] is not None and r[columns.index("seed")] == 0 for r in rows)
    (csv,) = tmp_path.glob("csv/version_*/metrics.csv")
    assert len(csv.read_text().splitlines()) == 1 + 3  # header and one row per point


def test_timing_under_a_parallel_launcher_warns_and_is_recorded(tmp_path, toy_tiny_dir, monkeypatch, caplog):
    """Jobs timed side by side slow each other: a point measured at 3.1x beside one at 0.58x."""
    from hydra.core.hydra_config import HydraConfig

    import diversed.evaluate as ev
    from diversed.sweep.results import ResultStore

    launcher = OmegaConf.create(
        {
            "launcher": {
                "_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
                "n_jobs": -1,
            }
        }
    )
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: launcher))
    with caplog.at_level(logging.WARNING, logger="diversed.evaluate"):
        ev.evaluate(small_eval(tmp_path / "timed", toy_tiny_dir, "logger=none"))
    assert "hydra/launcher=basic" in caplog.text and "timing.repeats=0" in caplog.text
    assert {r["timing"].get("parallel_launcher") for r in ResultStore(tmp_path / "timed").records()} == {
        "joblib n_jobs=-1"
    }
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="diversed.evaluate"):  # untimed: nothing to warn about
        ev.evaluate(small_eval(tmp_path / "untimed", toy_tiny_dir, "logger=none", "timing.repeats=0"))
    assert "side by side" not in caplog.text
    launcher.launcher.n_jobs = 1  # one job at a time: not recorded
    ev.evaluate(small_eval(tmp_path / "one", toy_tiny_dir, "logger=none"))
    assert all("parallel_launcher" not in r["timing"] for r in ResultStore(tmp_path / "one").records())
