"""Where a Hydra job writes, and what it knows of the jobs beside it.

- `run_dir(ckpt_path, new)`: `${diversed.run_dir:...}` in `hydra/default.yaml`. A training run
  resumed from `<run>/checkpoints/<name>.ckpt` writes to `<run>` again (its logs, checkpoints and
  exported head or draft continue there; Hydra keeps the resumed run's config apart,
  `config_subdir`); a checkpoint outside that layout, or none, gets `new` (a new timestamped
  directory).
- `NameJobsBySweep`: a Hydra callback (`hydra/evaluate.yaml`) that names a multirun's jobs by the
  overrides swept on the command line (`seed=0,1 task=gsm8k,xsum` gives `seed=0,task=gsm8k`, ...;
  `choice(...)`, `range(...)`, globs and `hydra.sweeper.params` count as sweeps): the fixed
  overrides are left out of Hydra's `override_dirname`, so a long command no longer cuts the
  differing part off, and the same command maps to the same directories (resume).
- `short_dirname(name)`: a job directory's name (`${diversed.dirname:...}`), cut with a digest of
  the whole past 120 characters, path separators replaced.
- `LogFile`: Hydra's job log file handler, which a read-only run directory does not stop (the
  console alone then shows the log); `config_subdir` likewise saves Hydra's copy of the config
  nowhere when given a run directory that cannot be written. Neither writes through a symbolic
  link: a log file that is one is not opened, and where Hydra's config copies (`.hydra`, its
  config.yaml, hydra.yaml, overrides.yaml) are links none is saved; each says so once on stderr,
  naming the link and the fix (remove it), and the job goes on (Hydra set both up before the job's
  own code runs, so neither can stop it with a user error).
- `sweep_job()`: this job's number and its sweep's directory inside a multirun, else None.
- `parallel_launcher()`: the launcher running this job beside others (joblib with n_jobs != 1),
  or None: times measured side by side are not comparable.

`run_dir`, `config_subdir` and `short_dirname` are the hydra configs' `${diversed.run_dir:...}`,
`${diversed.config_subdir:...}` and `${diversed.dirname:...}`, registered with the other resolvers
by `runtime.py` (which every entry point imports before Hydra composes).

It launches nothing (Hydra's launchers do) and decides nothing about what a job computes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


def short_dirname(name: str, limit: int = 120) -> str:
    """`name` with path separators replaced (a swept path would nest directories), as it is if at
    most `limit` characters, else its start and a digest of the whole (a file name stops at 255
    bytes); "" (a multirun with nothing swept) gives "single"."""
    name = name.replace("/", "_") or "single"
    if len(name) <= limit:
        return name
    return f"{name[: limit - 13]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def run_dir(ckpt_path: Any, new: str) -> str:
    """The run directory of an existing `<run>/checkpoints/<file>` (resume in place), else `new`."""
    ckpt = Path(str(ckpt_path)) if ckpt_path else None
    if ckpt is not None and ckpt.parent.name == "checkpoints" and ckpt.is_file():
        return str(ckpt.parent.parent)
    return new


def config_subdir(ckpt_path: Any, now: str, output_dir: Any = None) -> str | None:
    """Where Hydra saves the job's config in its run directory: `.hydra`, and `.hydra/resumed_<now>`
    for a run resumed in place (the first run's config stays as it was); nowhere (None) where
    `output_dir` is given and cannot be written (evaluate re-running a finished sweep read-only)."""
    sub = f".hydra/resumed_{now}" if run_dir(ckpt_path, "") else ".hydra"
    if output_dir is not None:
        path = Path(str(output_dir)) / sub
        linked = [p for p in (path, *(path / f for f in HYDRA_FILES)) if p.is_symlink()]
        if linked:  # Hydra's open() would write through it
            _say_once(
                f"warning: {linked[0]} is a symbolic link; Hydra's copy of the config is not saved "
                f"(it would write through the link): remove it (rm {linked[0]}) to have it saved"
            )
            return None
        while not path.exists() and path != path.parent:  # what would be written: the nearest existing part
            path = path.parent
        if not os.access(path, os.W_OK):
            return None
    return sub


HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra saves in the config subdir
_said: set[str] = set()


def _say_once(message: str) -> None:
    """`message` on stderr, once per process (Hydra resolves the config subdir more than once)."""
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr)


class LogFile(logging.FileHandler):
    """The job's log file (evaluate's `hydra/job_logging: diversed`), opened without following a
    symbolic link: where it cannot be opened (a read-only run directory) or is a link, one warning on
    stderr, and the console handler alone shows the log."""

    def _open(self):  # noqa: ANN202 (logging.FileHandler's)
        path = self.baseFilename
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in self.mode else os.O_TRUNC)
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            why = (
                f"it is a symbolic link, which would be written through: remove it (rm {path}) to have it"
                if os.path.islink(path)
                else e.strerror
            )
            print(
                f"warning: cannot write the log file {path} ({why}): the log goes to the console only",
                file=sys.stderr,
            )
            return open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (the handler closes it)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)  # noqa: SIM115 (as above)


class NameJobsBySweep(Callback):
    """Before a multirun's jobs are launched, leave every override that is not swept out of the
    jobs' `override_dirname` (the jobs' configs are composed from the multirun's own overrides, so
    this reaches every launcher: in-process, joblib workers, a cluster)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import read_write

        hydra_cfg = config.hydra
        given = OverridesParser.create().parse_overrides(list(hydra_cfg.overrides.task))
        swept = {o.key_or_group for o in given if o.is_sweep_override()}
        swept |= set((hydra_cfg.sweeper.get("params") or {}).keys())  # sweeps written in the config
        excluded = set(hydra_cfg.job.config.override_dirname.exclude_keys) - swept
        excluded |= {o.key_or_group for o in given} - swept
        keys = ",".join(f"'{k}'" for k in sorted(excluded))
        with read_write(hydra_cfg.overrides):
            hydra_cfg.overrides.hydra.append(f"hydra.job.config.override_dirname.exclude_keys=[{keys}]")


def sweep_job() -> tuple[int, str] | None:
    """(the job's number, the sweep's directory) inside a Hydra multirun job; None outside one (a
    single run, or not under Hydra: tests call the entry points' functions directly)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        return (int(hc.job.num), str(hc.sweep.dir)) if hc.mode == RunMode.MULTIRUN else None
    except Exception:  # not under Hydra (or a Hydra config without a job's fields)
        return None


def parallel_launcher() -> str | None:
    """'joblib n_jobs=<n>' when this job runs under Hydra's joblib launcher with n_jobs != 1 (jobs
    side by side on one machine), else None (not under Hydra, one job at a time)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        launcher = HydraConfig.get().launcher
    except Exception:  # not under Hydra (tests call the entry points' functions directly)
        return None
    n_jobs = launcher.get("n_jobs")
    if "joblib" in str(launcher.get("_target_", "")).lower() and n_jobs != 1:
        return f"joblib n_jobs={n_jobs}"
    return None
