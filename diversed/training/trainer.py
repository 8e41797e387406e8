"""The training entry points' Lightning part: the trainer checked against this machine, the run
prepared, fitted, saved and exported (train and distill alike).

- `check_trainer(cfg, entry)`: the trainer's accelerator, devices, num_nodes, strategy and precision
  checked against this machine by Lightning itself (a bare Trainer built from them) and against what
  it would not run as asked on a CPU (16-bit floats, bf16 without bf16 instructions, more processes
  than cores), before the data and the weights: a ConfigError naming the key, its value and the fix.
- `prepare_training(cfg, max_new_tokens)`: the training entry points' start (data, then the pair's
  files against every prompt, `tasks/context.check_context`, then the weights).
- `fit(cfg, model, datamodule)`: callbacks, loggers, trainer, fit or resume exactly, last.ckpt
  (`checkpoints.py`), then the best checkpoint's state exported whole by the module
  (`pair_module.PairModule.export`). A Ctrl-C (Lightning's own handling, which exits with status 1,
  included) ends as one line (`saved_training`: the latest checkpoint and the `ckpt_path=` that
  resumes from it).
- `progress_bar()`: Lightning's bar, reading steps when training runs by steps.

The settings are checked before this (`training/settings.py`); how an entry point runs (threads,
quiet output, loggers) is `config/runtime.py`'s. It does not decide what a training run logs (its
module does) nor where a job writes (`config/jobs.py`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from diversed.config.runtime import (
    finish,
    instantiate,
    keep_freed_memory,
    make_loggers,
    quiet,
    set_threads,
    show_config,
)
from diversed.errors import ConfigError, on_interrupt
from diversed.files.atomic import remove_stale, write_directory
from diversed.models.packed import cpu_has_bf16
from diversed.models.pair import describe_pair
from diversed.tasks.context import check_context
from diversed.training.checkpoints import AtomicCheckpointIO, LastCheckpoint, StepSeeds

log = logging.getLogger(__name__)


def progress_bar() -> Any:
    """Lightning's rich bar (its default where rich is installed; None: its tqdm bar), whose title read
    `Epoch 0/-2` when training runs by steps (max_epochs = -1): here `Epoch 0 · steps 1-20 of 200`.
    The logger's version is left out of its metrics."""
    import importlib.util

    if importlib.util.find_spec("rich") is None:
        return None
    from lightning.pytorch.callbacks import RichProgressBar

    class StepsBar(RichProgressBar):
        def _get_train_description(self, current_epoch: int) -> str:
            t = self.trainer
            if t.max_epochs != -1 or t.max_steps < 1:
                return super()._get_train_description(current_epoch)
            first = t.global_step + 1
            return (
                f"Epoch {current_epoch} · steps {first}-{first - 1 + int(self.total_train_batches)} "
                f"of {t.max_steps}"
            )

        def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
            return {k: v for k, v in super().get_metrics(trainer, pl_module).items() if k != "v_num"}

    # in a log file (no terminal) one wide line, not the metrics wrapped at 80 columns one per line
    return StepsBar(console_kwargs=None if sys.stdout.isatty() else {"width": 250})


# ----------------------------------------------------------------------------- the trainer's hardware

# the trainer's keys Lightning checks against the machine, in the order it reads them
HARDWARE = ("accelerator", "num_nodes", "devices", "strategy", "precision")


def _lightning(flags: dict[str, Any]) -> Any:
    """A bare Lightning Trainer with `flags` (no callbacks, loggers or files), or the exception that
    building it raised; its start-up messages and warnings kept quiet (the real one says them)."""
    from lightning.pytorch import Trainer

    names = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
    levels = {n: logging.getLogger(n).level for n in names}
    try:
        for n in names:
            logging.getLogger(n).setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Trainer(
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                **flags,
            )
    except Exception as e:  # Lightning's refusal of the flags: MisconfigurationException, ValueError, ...
        return e
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _refusal(key: str, value: Any, error: Exception) -> str:
    """One line: `trainer.<key>=<value>`, why Lightning refuses it here, and what to set."""
    said = " ".join(str(error).split()).rstrip(".") or type(error).__name__
    gpus = _gpus()
    if key == "accelerator":
        if str(value).lower() in ("gpu", "cuda") and not gpus:
            said = "torch sees no GPU on this machine"
        fix = "set trainer.accelerator=gpu (or auto)" if gpus else "set trainer.accelerator=cpu (or auto)"
    elif key == "devices":
        fix = (
            f"set trainer.devices=1 (this machine has {gpus} GPU{'s' if gpus != 1 else ''})"
            if gpus
            else "set trainer.devices=1 (N CPU processes: trainer=ddp trainer.devices=N)"
        )
    elif key == "num_nodes":
        fix = "set trainer.num_nodes=1 (or the number of machines of a cluster run)"
    elif key == "strategy":
        fix = "set trainer.strategy=auto (one process), or trainer=ddp for one process per device"
    else:
        fix = "set trainer.precision=32-true (the default: the head trains in fp32), or bf16-mixed"
    return f"trainer.{key}={value!r}: {said}: {fix}"


def _cpu_problems(given: dict[str, Any], built: Any) -> list[str]:
    """What Lightning lets through on a CPU but would not run as asked: 16-bit floats (it turns
    16-mixed into bf16-mixed without a word; fp16 has no fast CPU kernels), bf16 on a CPU without bf16
    instructions (emulated through fp32: slower than fp32), more training processes than cores."""
    lines = []
    precision = str(given.get("precision", ""))
    to_32 = "set trainer.precision=32-true (the default: the head trains in fp32)"
    if precision in ("16", "16-mixed", "16-true"):
        instead = "fp16 without fast kernels" if precision == "16-true" else "bf16-mixed instead"
        lines.append(
            f"trainer.precision={given['precision']!r}: 16-bit floats are for GPUs; on this CPU Lightning "
            f"would run {instead}: {to_32}{', or bf16-mixed' if cpu_has_bf16() else ''} (or "
            "trainer.accelerator=gpu on a machine with GPUs)"
        )
    elif precision.startswith("bf16") and not cpu_has_bf16():
        import torch

        lines.append(
            f"trainer.precision={given['precision']!r}: this CPU has no bf16 instructions (AVX512-BF16 or "
            f"AMX; torch reads it as {torch.backends.cpu.get_cpu_capability()}), so torch would emulate "
            f"bf16 through fp32, slower than fp32: {to_32}"
        )
    cores = _cores()
    if built.num_nodes == 1 and built.num_devices > cores:
        no_gpu = ", and torch sees no GPU here" if not _gpus() else ""
        lines.append(
            f"trainer.devices={given.get('devices')!r} on the CPU starts {built.num_devices} training "
            f"processes, each with its own copy of the pair, on this machine's {cores} CPU "
            f"core{'s' if cores != 1 else ''}{no_gpu}: set trainer.devices=1 (or up to {cores}), or "
            "trainer.accelerator=gpu on a machine with GPUs"
        )
    return lines


def check_trainer(cfg: Any, entry: str) -> None:
    """`cfg.trainer`'s hardware settings (accelerator, num_nodes, devices, strategy, precision) as
    Lightning reads them, on this machine, before any data or weights load: a bare Trainer is built
    from them (`_lightning`) and its refusal becomes a ConfigError naming the key (the first whose
    addition Lightning refuses), its value and what to set; then what Lightning lets through on a CPU
    but would not run as asked (`_cpu_problems`). `check_train`/`check_distill` check the settings
    alone (hardware aside): a GPU preset's settings are valid on any machine."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    trainer = cfg.get("trainer") if hasattr(cfg, "get") else None
    if not trainer:
        return
    given = {}
    for key in HARDWARE:
        value = trainer.get(key)
        if value is not None:
            plain = isinstance(value, DictConfig | ListConfig)
            given[key] = OmegaConf.to_container(value, resolve=True) if plain else value
    built = _lightning(given)
    if isinstance(built, Exception):
        flags: dict[str, Any] = {}
        settings = ", ".join(f"trainer.{k}={v!r}" for k, v in given.items())
        line = f"{settings}: {' '.join(str(built).split()).rstrip('.')}: see configs/trainer/default.yaml"
        for key in given:
            flags[key] = given[key]
            if isinstance(refused := _lightning(flags), Exception):
                line = _refusal(key, given[key], refused)
                break
        raise ConfigError(f"bad settings for {entry}, nothing was loaded:\n  {line}")
    if type(built.accelerator).__name__ == "CPUAccelerator" and (lines := _cpu_problems(given, built)):
        raise ConfigError(f"bad settings for {entry}, nothing was loaded:\n  " + "\n  ".join(lines))


# ----------------------------------------------------------------------------- training


def prepare_training(cfg: Any, max_new_tokens: int | None, check_resume: Any = None) -> tuple[Any, Any]:
    """Threads, quiet start-up and seeds; the data module set up (a data error before the pair
    loads); the pair's files described without weights and every training and validation prompt
    checked against its context with `max_new_tokens` (None: the task's own) new tokens after it;
    with `cfg.ckpt_path`, `check_resume(card)`, the entry point's check of that checkpoint against the pair;
    only then the pair loaded. Returns (datamodule, pair). Settings are checked before this."""
    import hydra
    import lightning as L

    set_threads(cfg.get("runtime", {}).get("threads"))
    keep_freed_memory(cfg.get("runtime", {}).get("malloc", "keep"))
    quiet(bool(cfg.get("runtime", {}).get("verbose", False)))
    L.seed_everything(cfg.seed, workers=True)
    log.info(f"Loading data for task {cfg.task.name}")
    datamodule = hydra.utils.instantiate(cfg.data, task=hydra.utils.instantiate(cfg.task, _partial_=True))
    datamodule.setup("fit")  # data errors (files, fields, no rows) before the pair loads
    card = describe_pair(cfg.pair)  # the pair's files, no weights: vocabularies, context
    for task in (datamodule.train_task, datamodule.val_task):
        check_context(card, task, max_new_tokens or datamodule.train_task.max_new_tokens)
    if check_resume is not None and cfg.get("ckpt_path"):
        check_resume(card)
    show_config(cfg)  # once everything is checked: an error is not buried under the config
    log.info(f"Loading pair <{cfg.pair._target_}>")
    pair = instantiate(cfg.pair)
    pair.identity = card.identity if card is not None else {}  # what a trained head records of its pair
    return datamodule, pair


def _say_where_it_resumes(ckpt_path: str | None, out: Path) -> None:
    if not ckpt_path:
        return
    if Path(ckpt_path).resolve().parent.parent == out.resolve():
        log.info(f"Resuming in place from {ckpt_path}: logs, checkpoints and the export continue in {out}")
    else:
        log.info(
            f"Resuming from {ckpt_path}, which is not in <run dir>/checkpoints/ of this run: this run "
            f"writes to {out}"
        )


def saved_training(cfg: Any, trainer: Any = None, callbacks: Any = ()) -> str:
    """What a Ctrl-C of train or distill says (`errors.on_interrupt`): the step it stopped at (with
    `trainer`), the run's latest checkpoint (`<run dir>/checkpoints/last.ckpt`, with the step it holds
    where this run wrote it) and the command line that resumes from it; or that none was written yet."""
    from omegaconf import OmegaConf

    last = Path(str(cfg.paths.output_dir)) / "checkpoints" / "last.ckpt"
    at = ""
    if trainer is not None:
        of = f" of {trainer.max_steps}" if (trainer.max_steps or -1) > 0 else ""
        at = f"at step {trainer.global_step}{of}; "
    if last.is_file():
        step = max((getattr(c, "saved_step", -1) for c in callbacks), default=-1)
        holds = f" (step {step})" if step >= 0 else ""
        return f"{at}the latest checkpoint is {last}{holds}: the same command with ckpt_path={last} resumes"
    if cfg.get("ckpt_path"):
        return f"{at}no new checkpoint was written: the same command resumes from {cfg.ckpt_path} again"
    every = OmegaConf.select(cfg, "callbacks.last_checkpoint.every_n_train_steps", default=None)
    when = f" (one every {every} steps: callbacks.last_checkpoint.every_n_train_steps)" if every else ""
    return f"{at}no checkpoint was written yet{when}: the same command starts again"


class Fitted(NamedTuple):
    metrics: dict[str, float]  # the trainer's last callback metrics
    best: str  # the best checkpoint's path ("" without a monitored checkpoint)
    # <paths.output_dir>/<the module's `exported`>, written by this process if `is_global_zero`
    exported: Path
    is_global_zero: bool  # this process exported (one process of a distributed run)


def fit(
    cfg: Any, model: Any, datamodule: Any, *, weights_only: bool = True, job_type: str = "train"
) -> Fitted:
    """Instantiate `cfg.callbacks` (and the progress bar, and `checkpoints.StepSeeds`), the loggers
    (`job_type`: the entry point) and `cfg.trainer`, its checkpoints written atomically
    (`checkpoints.AtomicCheckpointIO`; temporary files of a killed writer removed first); fit
    `model` (a `pair_module.PairModule`; resuming from `cfg.ckpt_path`: the run it continues, step
    for step); write the latest state, optimizer included, to `<paths.output_dir>/checkpoints/last.ckpt`;
    load the best checkpoint's state into `model` and export it (`model.export`) to
    `<paths.output_dir>/<model.exported>` from one process, whole or not at all (a kill or a full
    disk leaves the previous export, a resumed run's, or none); close the loggers."""
    import hydra
    import torch
    from omegaconf import OmegaConf

    callbacks = [
        hydra.utils.instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c
    ]
    bar = progress_bar() if cfg.trainer.get("enable_progress_bar", True) else None
    if bar is not None and not any("ProgressBar" in type(c).__name__ for c in callbacks):
        callbacks.append(bar)
    callbacks.append(StepSeeds(cfg.seed))
    for stale in remove_stale(Path(cfg.paths.output_dir) / "checkpoints"):
        log.info(f"Removed {stale}, left by a run killed while writing it")
    loggers = make_loggers(cfg, job_type=job_type)
    trainer = hydra.utils.instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=[AtomicCheckpointIO()]
    )
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    _say_where_it_resumes(cfg.get("ckpt_path"), Path(cfg.paths.output_dir))
    with on_interrupt(lambda: saved_training(cfg, trainer, callbacks)):
        try:
            trainer.fit(
                model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"), weights_only=weights_only
            )
        except SystemExit:
            if trainer.interrupted:  # Lightning's Ctrl-C handling ends in sys.exit(1): a Ctrl-C again
                raise KeyboardInterrupt from None
            raise
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if not any(isinstance(c, LastCheckpoint) and c.saved_step == trainer.global_step for c in callbacks):
        # (LastCheckpoint wrote the last step as the loop stood then: this one counts the epoch as done)
        trainer.save_checkpoint(Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt", weights_only=False)
    best = next(
        (c.best_model_path for c in trainer.checkpoint_callbacks if c.monitor and c.best_model_path), ""
    )
    if best:  # the best state by the monitored metric
        model.load_state_dict(torch.load(best, map_location="cpu", weights_only=True)["state_dict"])
    exported = Path(cfg.paths.output_dir) / model.exported
    if trainer.is_global_zero:
        write_directory(exported, lambda directory: model.export(directory, best))
    finish(loggers)
    return Fitted(metrics, best, exported, trainer.is_global_zero)
