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
- `LeaveNothingWhenRefused`: a Hydra callback (`hydra/default.yaml`, `hydra/evaluate.yaml`): a run
  refused by a user error leaves no folder. What the run directory held before the run (in a
  multirun: the sweep directory and its job directories) is recorded; on a refusal a directory the
  run made is removed if it holds nothing but Hydra's own files (`.hydra/` copies, the job's log),
  an unheld run lock and empty directories; one that existed (a resumed run) is never removed, only
  Hydra's files in it put back as they were (`undo_refused`).
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

from diversed.errors import user_error, when_refused


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


# ----------------------------------------------------------------------------- a refused run leaves nothing


class _Before:
    """What a directory held before a run: whether it existed; if not, the nearest directory above it
    that did (those in between are the run's); if so, its entries' names and `.hydra`'s, Hydra's
    config copies' bytes, its log files' lengths and the size and time of change of each other entry
    (a run that wrote there, before a user error stopped it, is told by them)."""

    def __init__(self, path: Path, made_from: Path | None = None) -> None:
        self.path = path.absolute()
        self.existed = made_from is None and self.path.is_dir()
        self.readable = True
        self.entries: frozenset[str] = frozenset()
        self.hydra_entries: frozenset[str] = frozenset()
        self.copies: dict[Path, bytes] = {}
        self.logs: dict[Path, int] = {}
        self.stats: dict[str, tuple[int, int]] = {}
        if made_from is None:
            made_from = self.path
            while not made_from.is_dir() and made_from != made_from.parent:
                made_from = made_from.parent
        self.made_from = made_from
        if not self.existed:
            return
        try:
            self.entries = frozenset(p.name for p in self.path.iterdir())
            if (self.path / ".hydra").is_dir():
                self.hydra_entries = frozenset(p.name for p in (self.path / ".hydra").iterdir())
            self.copies = {p: p.read_bytes() for p in _hydra_copies(self.path)}
            self.logs = {p: p.stat().st_size for p in self.path.glob("*.log") if _plain(p)}
            self.stats = _stats(self.path)
        except OSError:  # unreadable: nothing in it is touched
            self.readable = False


def _stats(run: Path) -> dict[str, tuple[int, int]]:
    """Each entry of `run` but Hydra's (`.hydra`, the logs) and the run lock: its size and time of
    change (a directory's changes as a file is added to or removed from it)."""
    from diversed.files.rundir import LOCK_NAME  # pandas-free at import: config.runtime imports this

    out = {}
    for p in run.iterdir():
        if p.name not in (".hydra", LOCK_NAME) and p.suffix != ".log":
            st = p.lstat()
            out[p.name] = (st.st_size if not p.is_dir() else 0, st.st_mtime_ns)
    return out


def _plain(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _hydra_copies(run: Path) -> list[Path]:
    """Hydra's config copies in `run`: `.hydra/<file>` and `.hydra/<dir>/<file>` (a resumed run's),
    each one of HYDRA_FILES and a plain file."""
    found = [*run.glob(".hydra/*.yaml"), *run.glob(".hydra/*/*.yaml")]
    return [p for p in found if p.name in HYDRA_FILES and _plain(p) and not p.parent.is_symlink()]


def _file_handlers() -> list[tuple[logging.Logger, logging.FileHandler]]:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return [
        (lg, h)
        for lg in loggers
        for h in getattr(lg, "handlers", [])
        if isinstance(lg, logging.Logger) and isinstance(h, logging.FileHandler)
    ]


def _job_logs(run: Path) -> set[Path]:
    """The log files in `run` that this process's logging handlers write (Hydra's job log)."""
    return {Path(h.baseFilename) for _, h in _file_handlers() if Path(h.baseFilename).parent == run}


def _close_logs(logs: set[Path]) -> None:
    """Close and drop the logging handlers writing `logs` (the console handler goes on)."""
    for logger, h in _file_handlers():
        if Path(h.baseFilename) in logs:
            h.close()
            logger.removeHandler(h)


def _unheld_lock(path: Path) -> bool:
    from diversed.files.rundir import unheld_lock  # pandas-free at import: config.runtime imports this

    return unheld_lock(path)


def _empty_tree(path: Path) -> bool:
    """Whether `path` is a directory holding nothing but such directories (none a link)."""
    if path.is_symlink() or not path.is_dir():
        return False
    return all(_empty_tree(p) for p in path.iterdir())


def _remove_empty(path: Path) -> None:
    for p in path.iterdir():
        _remove_empty(p)
    path.rmdir()


def _remove_parents(before: _Before) -> None:
    """The directories above `before.path` that the run made, each if empty, up to the one that existed."""
    parent = before.path.parent
    while parent != before.made_from and parent.is_relative_to(before.made_from):
        try:
            parent.rmdir()
        except OSError:  # not empty (another run's), or gone
            return
        parent = parent.parent


def undo_refused(before: _Before) -> None:
    """Put `before.path` back as it was before a refused run. Made by the run: removed, with the
    parents the run made, when it holds nothing but Hydra's files (the `.hydra` copies, the job's log),
    an unheld run directory lock (`rundir.hold`) and empty directories, else left whole. Existed: never
    removed; where the run changed nothing else in it (each entry's size and time of change as they
    were) and no other process holds its lock, Hydra's copies back as they were (those the run added
    removed), the job's log cut back to its length, the empty directories and unheld lock the run
    added removed; nothing else touched."""
    run = before.path
    if run.is_symlink() or not run.is_dir() or not before.readable:
        return
    logs = _job_logs(run)
    if not before.existed:
        own = {*_hydra_copies(run), *logs}
        for top, dirs, files in os.walk(run):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                p = Path(top) / name
                if p not in own and not _unheld_lock(p):
                    return  # something the run wrote, or someone put there: the directory stays whole
        _close_logs(logs)
        for top, _, files in os.walk(run):
            for name in files:
                (Path(top) / name).unlink()
        _remove_empty(run)
        _remove_parents(before)
        return
    from diversed.files.rundir import LOCK_NAME  # pandas-free at import: config.runtime imports this

    if (run / LOCK_NAME).exists() and not _unheld_lock(run / LOCK_NAME):
        return  # another process writes there (its log lines may follow this run's): nothing is touched
    now = {k: v for k, v in _stats(run).items() if k in before.entries or not _empty_tree(run / k)}
    if now != before.stats:
        return  # the run wrote there before it was stopped: its log and config copies stay with it
    for p in _hydra_copies(run):
        if p not in before.copies:
            p.unlink()  # a copy this run added (.hydra/resumed_<time>/ of a resumed training run)
        elif p.read_bytes() != before.copies[p]:
            p.write_bytes(before.copies[p])
    _close_logs(logs)
    for p in logs:
        if not _plain(p):
            continue
        if p not in before.logs:
            p.unlink()
        elif p.stat().st_size > before.logs[p]:
            os.truncate(p, before.logs[p])
    added = [p for p in run.iterdir() if p.name not in before.entries]
    if ".hydra" in before.entries and (run / ".hydra").is_dir():
        added += [p for p in (run / ".hydra").iterdir() if p.name not in before.hydra_entries]
    for p in added:
        if _empty_tree(p):
            _remove_empty(p)
        elif _unheld_lock(p):
            p.unlink()


class LeaveNothingWhenRefused(Callback):
    """A run refused by a user error (`errors.UserError`: a setting, a path) leaves no folder behind.
    Hydra makes the run directory and writes its config copies and the job's log there before the
    job's own code runs: this records what the run directory (in a multirun: the sweep directory and
    each job directory in it) held before, and on a refusal puts it back (`undo_refused`): a directory
    the run made goes when it holds nothing but Hydra's files; one that existed (a resumed run) is never
    removed, only Hydra's files in it put back. A single run is undone by `hydra_task` before it prints
    the message (`errors.when_refused`), or at the job's end where Hydra reports the error (verbose); a
    job of a multirun at its end; the sweep directory when the process exits, if the multirun made it
    and no job directory is left in it (`multirun.yaml`, Hydra's, goes with it; in one that existed it
    is put back when every job was refused)."""

    def __init__(self) -> None:
        self._run: _Before | None = None
        self._sweep: _Before | None = None
        self._jobs: dict[str, _Before] = {}
        self._started = self._refused = 0
        self._forget: Any = None

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        try:
            run = self._run = _Before(Path(str(config.hydra.run.dir)))
        except Exception:  # a run directory that cannot be resolved or read: nothing is undone
            return
        self._forget = when_refused(lambda: undo_refused(run))

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        if self._forget is not None:
            self._forget()

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        import atexit

        try:
            sweep = self._sweep = _Before(Path(str(config.hydra.sweep.dir)))
            if sweep.existed and sweep.readable:
                self._jobs = {n: _Before(sweep.path / n) for n in sweep.entries if (sweep.path / n).is_dir()}
                multirun = sweep.path / "multirun.yaml"
                if _plain(multirun):
                    sweep.copies[multirun] = multirun.read_bytes()
        except Exception:
            self._sweep = None
            return
        atexit.register(self._end_of_multirun)

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        self._started += 1

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        failed = getattr(job_return, "_return_value", None)  # (`return_value` raises it)
        if job_return.status != JobStatus.FAILED or not isinstance(failed, BaseException):
            return
        if user_error(failed) is None:
            return
        self._refused += 1
        job = Path(str(config.hydra.runtime.output_dir)).absolute()
        sweep = self._sweep
        if self._run is not None and job == self._run.path:
            undo_refused(self._run)
        elif sweep is not None and sweep.readable and job.is_relative_to(sweep.path) and job != sweep.path:
            top = job.relative_to(sweep.path).parts[0]
            if top not in self._jobs:  # made by this multirun (and the directories in between)
                undo_refused(_Before(job, made_from=sweep.path))
            elif self._jobs[top].path == job:
                undo_refused(self._jobs[top])

    def _end_of_multirun(self) -> None:
        sweep = self._sweep
        if sweep is None or sweep.path.is_symlink() or not sweep.path.is_dir():
            return
        multirun = sweep.path / "multirun.yaml"
        if not sweep.existed:
            rest = [p for p in sweep.path.iterdir() if p != multirun]
            if all(_empty_tree(p) for p in rest) and not multirun.is_symlink():
                multirun.unlink(missing_ok=True)
                _remove_empty(sweep.path)
                _remove_parents(sweep)
        elif self._started and self._refused == self._started and multirun in sweep.copies:
            multirun.write_bytes(sweep.copies[multirun])  # every job refused: the sweep's file as it was
