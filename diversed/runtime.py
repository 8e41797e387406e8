"""How an entry point runs: torch threads, quiet third-party output, and one logger run per job.

- `set_threads(n)`: `runtime.threads` in the train and evaluate configs. Two CPU jobs side by side
  with torch's default threads each (one per core) fight over the cores: a toy training took 259 s
  beside another instead of 13 s alone, and 14.5 s with one thread each.
- `quiet()`: third-party start-up noise (transformers' weight-loading bars and advice, Lightning's
  tips, known harmless warnings) off unless `runtime.verbose` is true; our own log lines stay.
- `instantiate(cfg)`: Hydra's, with our errors unwrapped (the message says what to set).
- `make_loggers(cfg)` / `finish(loggers)`: the configured Lightning loggers (CSV, wandb offline),
  each job of a Hydra multirun in its own run (wandb would otherwise reuse the first job's run),
  closed at the end of the job.
- `short_dirname(name)`: a multirun job's directory (`${diversed.dirname:...}` in the hydra config),
  Hydra's override_dirname cut to a length every file system takes, with a digest of the rest;
  `${diversed.pair_name:target,draft}` names a local pair by its models (`pair.pair_name`).
- `help_groups(choices)` / `module_doc(name)`: the `--help` of the Hydra entry points
  (`${diversed.groups:...}`, `${diversed.doc:...}` in `configs/hydra/help/`): the config groups the
  entry point composes, with their options, and what the program does (its docstring).
- `prepare_training(cfg, max_new_tokens)`: the training entry points' start (data, then the pair's
  files against every prompt, then the weights).
- `fit(cfg, model, datamodule)`: the training entry points' Lightning part (callbacks, loggers,
  trainer, fit or resume, last.ckpt, the best checkpoint's state).
- `optimizers(module, optimizer, schedule, warmup_steps)`: what a training module's
  `configure_optimizers` returns: the optimizer, with transformers' learning-rate schedule.

It does not decide what is logged (the entry points do).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger(__name__)


def short_dirname(name: str, limit: int = 120) -> str:
    """`name` if it is at most `limit` characters, else its start and a digest of the whole
    (a file name stops at 255 bytes; a sweep with many overrides names its jobs longer)."""
    if len(name) <= limit:
        return name
    import hashlib

    return f"{name[: limit - 13]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


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

    for name, resolver in (("diversed.dirname", short_dirname), ("diversed.doc", module_doc),
                           ("diversed.groups", help_groups), ("diversed.pair_name", _pair_name)):  # fmt: skip
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def _pair_name(target: Any, draft: Any) -> str:
    from diversed.pair import pair_name  # torch is imported when a name is asked for, not with this module

    return pair_name(target, draft)


_register_resolvers()

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
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                 "lightning.pytorch.accelerators.cuda", "huggingface_hub", "datasets"):  # fmt: skip
        logging.getLogger(name).setLevel(logging.WARNING)


def _job_suffix() -> str | None:
    """'-<job number>' inside a Hydra multirun job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        return f"-{hc.job.num}" if hc.mode == RunMode.MULTIRUN else None
    except Exception:  # not under Hydra (tests call the functions directly)
        return None


def make_loggers(cfg: Any) -> list[Any]:
    """The Lightning loggers of `cfg.logger` (a group of `_target_` entries); in a multirun each
    job's wandb run gets its own name (the job number appended)."""
    import hydra

    suffix = _job_suffix()
    loggers = []
    for entry in (cfg.get("logger") or {}).values():
        if not entry or "_target_" not in entry:
            continue
        extra = {}
        if suffix and "Wandb" in str(entry["_target_"]) and entry.get("name"):
            extra["name"] = f"{entry['name']}{suffix}"
        loggers.append(hydra.utils.instantiate(entry, **extra))
    return loggers


def finish(loggers: list[Any], status: str = "success") -> None:
    """Flush and close each logger; a wandb run is finished so the next job starts its own."""
    for lg in loggers:
        lg.finalize(status)
        if type(lg).__name__ == "WandbLogger":
            import wandb

            if wandb.run is not None:
                wandb.finish()


def prepare_training(cfg: Any, max_new_tokens: int | None, before_weights: Any = None) -> tuple[Any, Any]:
    """Threads, quiet start-up and seeds; the data module set up (a data error before the pair
    loads); the pair's files described without weights and every training and validation prompt
    checked against its context with `max_new_tokens` (None: the task's own) new tokens after it;
    `before_weights(card)`, the entry point's own check with the pair's card (its `ckpt_path`);
    only then the pair loaded. Returns (datamodule, pair). Settings are checked before this."""
    import hydra
    import lightning as L

    from diversed.pair import describe_pair
    from diversed.preflight import check_context

    set_threads(cfg.get("runtime", {}).get("threads"))
    quiet(bool(cfg.get("runtime", {}).get("verbose", False)))
    L.seed_everything(cfg.seed, workers=True)
    log.info(f"Loading data for task {cfg.task.name}")
    datamodule = hydra.utils.instantiate(cfg.data, task=hydra.utils.instantiate(cfg.task, _partial_=True))
    datamodule.setup("fit")  # data errors (files, fields, no rows) before the pair loads
    card = describe_pair(cfg.pair)  # the pair's files, no weights: vocabularies, context
    for task in (datamodule.train_task, datamodule.val_task):
        check_context(card, task, max_new_tokens or datamodule.train_task.max_new_tokens)
    if before_weights is not None:
        before_weights(card)
    log.info(f"Loading pair <{cfg.pair._target_}>")
    pair = instantiate(cfg.pair)
    pair.identity = card.identity if card is not None else {}  # what a trained head records of its pair
    return datamodule, pair


LR_SCHEDULES = ("constant", "cosine", "linear")


def optimizers(module: Any, optimizer: Any, schedule: str = "constant", warmup_steps: int = 0) -> Any:
    """`optimizer` alone, or with transformers' schedule stepped every optimizer step: linear
    warm-up over `warmup_steps`, then constant, cosine or linear decay to 0 over the run's steps
    (max_steps, or epochs × batches per epoch)."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {schedule!r}")
    if schedule == "constant" and not warmup_steps:
        return optimizer
    from transformers import get_scheduler

    name = "constant_with_warmup" if schedule == "constant" else schedule
    total = int(module.trainer.estimated_stepping_batches)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class Fitted(NamedTuple):
    metrics: dict[str, float]  # the trainer's last callback metrics
    best: str  # the best checkpoint's path ("" without a monitored checkpoint)
    state: dict[str, Any] | None  # its state dict (None without one)
    is_global_zero: bool  # this process exports (one process of a distributed run)
    loggers: list[Any]  # to `finish` once the export is written


def fit(cfg: Any, model: Any, datamodule: Any, *, weights_only: bool = True) -> Fitted:
    """Instantiate `cfg.callbacks`, the loggers and `cfg.trainer`; fit `model` (resuming from
    `cfg.ckpt_path`); write the latest state, optimizer included, to
    `<paths.output_dir>/checkpoints/last.ckpt`; load the best checkpoint's state dict."""
    import hydra
    import torch
    from omegaconf import OmegaConf

    callbacks = [hydra.utils.instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c]
    loggers = make_loggers(cfg)
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"), weights_only=weights_only)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    trainer.save_checkpoint(Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt", weights_only=False)
    best = next((c.best_model_path for c in trainer.checkpoint_callbacks if c.monitor and c.best_model_path), "")
    state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"] if best else None
    return Fitted(metrics, best, state, trainer.is_global_zero, loggers)
