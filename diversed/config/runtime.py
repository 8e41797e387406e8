"""How an entry point runs: torch threads, quiet third-party output, its config, and one logger run per job.

- `set_threads(n)`: `runtime.threads` in the train and evaluate configs. Two CPU jobs side by side
  with torch's default threads each (one per core) fight over the cores: a toy training took 259 s
  beside another instead of 13 s alone, and 14.5 s with one thread each.
- `keep_freed_memory()`: `runtime.malloc=keep` (the default): glibc's allocator keeps the memory a
  process frees for its next tensors instead of giving it back to the system and faulting it in
  again, page by page (torch's CPU tensors come from malloc; glibc serves every block over 32 MB by
  a fresh mmap). Measured on 2 cores: drawing SmolLM2's samples for 64 XSum prompts took 44.6 s
  instead of 64.5 (system time 2 s instead of 28); the peak memory rises (a distillation stage:
  6.3 GB instead of 4.9). `runtime.malloc=system` leaves the allocator as it is.
- `quiet()`: third-party start-up noise (transformers' weight-loading bars and advice, Lightning's
  tips, known harmless warnings) off unless `runtime.verbose` is true; our own log lines stay.
- `instantiate(cfg)`: Hydra's, with our errors unwrapped (the message says what to set).
- `show_config(cfg)`: the job's config, resolved where it can be, in the log once every check has
  passed (before the weights load; an error is not printed under the config).
- `make_loggers(cfg, job_type)` / `finish(loggers)`: the configured Lightning loggers (CSV by
  default; wandb when asked, offline and silent unless set otherwise), each job of a Hydra
  multirun in its own wandb run, grouped by the sweep's directory; closed at the end of the job.
- `PointLog`: an evaluation's records to those loggers: one CSV row per grid point, and one row
  per point of a wandb Table logged as points finish (a killed job keeps what it logged).
- `progress_bar()`: Lightning's bar, reading steps when training runs by steps.
- `${diversed.pair_name:target,draft}` names a local pair by its models (`pair.pair_name`).
- `help_groups(choices)` / `module_doc(name)`: the `--help` of the Hydra entry points
  (`${diversed.groups:...}`, `${diversed.doc:...}` in `configs/hydra/help/`): the config groups the
  entry point composes, with their options, and what the program does (its docstring).
- `check_trainer(cfg, entry)`: the trainer's accelerator, devices, num_nodes, strategy and precision
  checked against this machine by Lightning itself (a bare Trainer built from them) and against what
  it would not run as asked on a CPU (16-bit floats, bf16 without bf16 instructions, more processes
  than cores), before the data and the weights: a ConfigError naming the key, its value and the fix.
- `prepare_training(cfg, max_new_tokens)`: the training entry points' start (data, then the pair's
  files against every prompt, then the weights).
- `fit(cfg, model, datamodule)`: the training entry points' Lightning part (callbacks, loggers,
  trainer, fit or resume exactly, last.ckpt; `checkpoints.py`), then the best checkpoint's state
  exported whole by the module (`pair_module.PairModule.export`). A Ctrl-C (Lightning's own handling,
  which exits with status 1, included) ends as one line (`saved_training`: the latest checkpoint and
  the `ckpt_path=` that resumes from it).

It does not decide what a training run logs (its module does) nor where a job writes (`jobs.py`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from diversed.config.jobs import config_subdir, run_dir, short_dirname, sweep_job
from diversed.decoding.stats import RECORD_FIELDS
from diversed.errors import on_interrupt
from diversed.sweep.methods import knobs

log = logging.getLogger(__name__)


def module_doc(name: str) -> str:
    """The first paragraph of module `name`'s docstring, on one line (a `--help`'s description)."""
    import importlib

    doc = importlib.import_module(name).__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split()).replace("$", "$$")  # $: Hydra's help template


def help_groups(choices: Any) -> str:
    """One line per config group the entry point composes (its `hydra.runtime.choices`, Hydra's own
    left out, and `+experiment`): the group's options in `configs/`, the one in use marked."""
    from diversed import CONFIG_DIR

    chosen = {str(k): v for k, v in dict(choices or {}).items() if not str(k).startswith("hydra")}
    chosen.setdefault("experiment", None)
    lines = []
    for group in sorted(chosen, key=lambda g: (g != "experiment", g)):
        options = sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))
        if options:
            named = [f"{o} (in use)" if o == chosen[group] else o for o in options]
            lines.append(f"  {'+' if group == 'experiment' else ''}{group}: {', '.join(named)}")
    return "\n".join(lines)


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    for name, resolver in (
        ("diversed.doc", module_doc),
        ("diversed.groups", help_groups),
        ("diversed.pair_name", _pair_name),
        ("diversed.dirname", short_dirname),
        ("diversed.run_dir", run_dir),
        ("diversed.config_subdir", config_subdir),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def _pair_name(target: Any, draft: Any) -> str:
    from diversed.models.pair import (
        pair_name,  # torch is imported when a name is asked for, not with this module
    )

    return pair_name(target, draft)


_register_resolvers()  # every ${diversed.*} of the hydra configs, before Hydra composes

# Messages that say nothing to a user of these entry points (each seen on every run).
_NOISE = (
    r".*does not have many workers.*",
    r".*The number of training batches .* is smaller than the logging interval.*",
    r".*Checkpoint directory .* exists and is not empty.*",
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",
    r".*`torch_dtype` is deprecated.*",
    r".*GPU available but not used.*",
)


def instantiate(cfg: Any, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, but our own errors (a bad data file, a missing model) come out as
    they were raised, not wrapped in Hydra's InstantiationException with the message repeated."""
    import hydra
    from hydra.errors import InstantiationException

    try:
        return hydra.utils.instantiate(cfg, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, ValueError | OSError | RuntimeError | KeyError):
            raise cause from None
        raise


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads (None leaves torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
MALLOC_SETTINGS = ("keep", "system")


def keep_freed_memory(how: str = "keep") -> bool:
    """With "keep", set glibc's allocator to serve every block from its heap (no mmap: `M_MMAP_MAX`
    0) and never to hand the heap's free top back (`M_TRIM_THRESHOLD` at its largest), so freed
    tensors' pages are reused without a page fault each. Returns whether it was set: "system", or a C
    library other than glibc (macOS, musl), leaves the allocator as it is. Process-wide, idempotent."""
    if how not in MALLOC_SETTINGS:
        raise ValueError(f"runtime.malloc must be one of {MALLOC_SETTINGS}, got {how!r}")
    if how == "system" or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only (musl has mallopt as a stub)  # noqa: B018
    except (OSError, AttributeError):
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def quiet(verbose: bool = False) -> None:
    """Silence third-party start-up noise (not errors) unless `verbose`."""
    if verbose:
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for pattern in _NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    for name in (
        "lightning.pytorch.utilities.rank_zero",
        "lightning.fabric.utilities.rank_zero",
        "lightning.fabric.utilities.seed",
        "lightning.pytorch.accelerators.cuda",
        "huggingface_hub",
        "datasets",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)


def show_config(cfg: Any) -> None:
    """Log the job's config as YAML, each value resolved where it can be (one that needs what is
    not there, such as Hydra's runtime outside Hydra, as written); once in a distributed run."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def resolved(node: Any) -> Any:
        if not isinstance(node, DictConfig | ListConfig):
            return node
        raw, out = OmegaConf.to_container(node, resolve=False), {}
        for key in range(len(node)) if isinstance(node, ListConfig) else node.keys():
            try:
                out[key] = resolved(node[key])
            except OmegaConfBaseException:
                out[key] = raw[key]
        return list(out.values()) if isinstance(node, ListConfig) else out

    if os.environ.get("LOCAL_RANK", "0") == "0":  # a distributed run's other processes: said once
        log.info("Config:\n" + OmegaConf.to_yaml(resolved(cfg)).rstrip())


def make_loggers(cfg: Any, job_type: str | None = None) -> list[Any]:
    """The Lightning loggers of `cfg.logger` (a group of `_target_` entries). A wandb run gets the
    entry point as its `job_type` and, in a multirun, the job number appended to its name and the
    sweep's directory as its `group` (the entry's own settings win); wandb's console output is
    what `logger.wandb.settings` says (silent by default)."""
    import hydra

    job = sweep_job()
    suffix, sweep_dir = (f"-{job[0]}", job[1]) if job else (None, None)
    loggers = []
    for entry in (cfg.get("logger") or {}).values():
        if not entry or "_target_" not in entry:
            continue
        extra = {}
        if "Wandb" in str(entry["_target_"]):
            if suffix and entry.get("name"):
                extra["name"] = f"{entry['name']}{suffix}"
            if sweep_dir and not entry.get("group"):
                extra["group"] = sweep_dir
            if job_type and not entry.get("job_type"):
                extra["job_type"] = job_type
        lg = hydra.utils.instantiate(entry, **extra)
        if "Wandb" in type(lg).__name__:
            lg._wandb_init.pop("anonymous", None)  # Lightning always passes it; wandb warns it has no effect
        loggers.append(lg)
    return loggers


def finish(loggers: list[Any], status: str = "success") -> None:
    """Flush and close each logger; a wandb run is finished so the next job starts its own."""
    for lg in loggers:
        lg.finalize(status)
        if type(lg).__name__ == "WandbLogger":
            import wandb

            if wandb.run is not None:
                wandb.finish()


class PointLog:
    """An evaluation's records to its loggers as they are written: to wandb, one row per grid point
    of the Table `points` (the point's settings and results, `columns`; logged incrementally where
    wandb can, so a killed job keeps its rows), never as steps of a chart; to any other logger (CSV),
    the record's numbers and names as one row, the point's index as its step. The registered methods' knob
    fields are columns too (`columns`, after `num_draft_tokens`)."""

    COLUMNS = (
        "pair",
        "task",
        "method",
        "temperature",
        "num_draft_tokens",
        "seed",
        "n_examples",
        "score",
        "score_ci_low",
        "score_ci_high",
        *RECORD_FIELDS,
        "new_tokens",
        "wall_time_s",
        "normalized_time",
        "tokens_per_s",
        "latency_s",
        "normalized_latency",
        "key",
    )

    def __init__(self, loggers: list[Any]) -> None:
        self.loggers, self.rows, self.table = loggers, [], None
        self.columns = (*self.COLUMNS[:5], *knobs(), *self.COLUMNS[5:])  # the methods registered by now

    def add(self, record: dict[str, Any], index: int) -> None:
        self.rows.append([record.get(c) for c in self.columns])
        for lg in self.loggers:
            if type(lg).__name__ == "WandbLogger":
                lg.experiment.log({"points": self._table()})
            else:
                lg.log_metrics(
                    {k: v for k, v in record.items() if isinstance(v, int | float | str) and k != "key"},
                    step=index,
                )

    def _table(self) -> Any:
        import wandb

        try:  # a wandb with incremental tables: only the new rows are written each time
            if self.table is None:
                self.table = wandb.Table(
                    columns=list(self.columns), log_mode="INCREMENTAL", allow_mixed_types=True
                )
            self.table.add_data(*self.rows[-1])
            return self.table
        except TypeError:  # older wandb: the whole table again
            return wandb.Table(columns=list(self.columns), data=self.rows, allow_mixed_types=True)


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
    from diversed.models.packed import cpu_has_bf16

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

    from diversed.errors import ConfigError

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

    from diversed.models.pair import describe_pair
    from diversed.sweep.preflight import check_context

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

    from diversed.files.atomic import remove_stale, write_directory
    from diversed.training.checkpoints import AtomicCheckpointIO, LastCheckpoint, StepSeeds

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
