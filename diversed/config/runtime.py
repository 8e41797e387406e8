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
- `${diversed.pair_name:target,draft}` names a local pair by its models (`files/provenance.pair_name`:
  pure string logic, which `models/pair.py` uses too).
- `help_groups(choices)` / `module_doc(name)`: the `--help` of the Hydra entry points
  (`${diversed.groups:...}`, `${diversed.doc:...}` in `configs/hydra/help/`): the config groups the
  entry point composes, with their options, and what the program does (its docstring).

It knows no model, task, sweep or training: an evaluation's records to the loggers are
`sweep/pointlog.py`'s, Lightning's trainer and `fit` are `training/trainer.py`'s. It does not decide
what a run logs nor where a job writes (`jobs.py`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from diversed import CONFIG_DIR
from diversed.config.jobs import config_subdir, run_dir, short_dirname, sweep_job
from diversed.files.provenance import pair_name

log = logging.getLogger(__name__)


def module_doc(name: str) -> str:
    """The first paragraph of module `name`'s docstring, on one line (a `--help`'s description)."""
    import importlib

    doc = importlib.import_module(name).__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split()).replace("$", "$$")  # $: Hydra's help template


def help_groups(choices: Any) -> str:
    """One line per config group the entry point composes (its `hydra.runtime.choices`, Hydra's own
    left out, and `+experiment`): the group's options in `configs/`, the one in use marked."""
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
        ("diversed.pair_name", pair_name),
        ("diversed.dirname", short_dirname),
        ("diversed.run_dir", run_dir),
        ("diversed.config_subdir", config_subdir),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


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
