"""The user's errors, apart from bugs, and how an entry point reports them: input the user fixes
(a setting, a data file, a model directory, the network), each message naming the problem and the
fix, is printed alone on stderr with exit status 2; anything else is a bug and keeps its traceback.

- `UserError`: the mark. Each error below is also the builtin error it refines, so
  `except ValueError` or `except FileNotFoundError` still catches it.
- `ConfigError(UserError, ValueError)`: a setting is wrong (`schema.py` checks the entry points'
  settings; `preflight.py` checks them against the files).
- `MissingFile(UserError, FileNotFoundError)`: a path given does not exist or does not hold what it
  should (a model directory, a head, a run directory).
- `MissingPackage(UserError, ImportError)`: a feature asked for needs an optional package.

The data, Hub, fetch and sandbox errors of `tasks/data.py`, `pair.py`, `weights.py` and
`execution.py`, a head whose weights are NaN or ±inf (`heads.NonFiniteHead`), and a full disk
(`atomic.py`), are user errors too (they derive from `UserError` where they are defined).

- `cli(run, argv)`: an argparse entry point's `main` (its console script): 0 once `run(argv)`
  returns, 2 with a user error's message (as argparse does for a bad flag).
- `hydra_task(task)`: a Hydra entry point's task function: a user error's message alone and exit
  status 2, instead of Hydra's "Error executing job" and traceback (exit status 1).
`HYDRA_FULL_ERROR=1` keeps the traceback of a user error too (and `runtime.verbose=true` in a Hydra
entry point). The modules decide what to raise; this module depends on nothing of the project's but
`jobs.sweep_job` (which depends on nothing), so every module may import it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any


class UserError(Exception):
    """Bad input, not a bug: the message says what is wrong and what to do."""


class ConfigError(UserError, ValueError):
    """A setting is wrong; the message names each bad key and the fix."""


class MissingFile(UserError, FileNotFoundError):
    """A path given does not exist, or does not hold what it should."""


class MissingPackage(UserError, ImportError):
    """An optional package is needed for what was asked (the message says how to install it)."""


# ----------------------------------------------------------------------------- reporting


def user_error(exc: BaseException) -> UserError | None:
    """The user error `exc` is (or that Hydra's InstantiationException wraps); None for a bug."""
    if not isinstance(exc, UserError) and type(exc).__name__ == "InstantiationException":
        exc = exc.__cause__  # type: ignore[assignment]
    return exc if isinstance(exc, UserError) else None


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def cli(run: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> int:
    """An entry point's exit status: 0 once `run(argv)` returns (what it returns is for Python
    callers, not the shell); 2 with a user error's message alone on stderr. A bug raises."""
    try:
        run(argv)
    except Exception as e:
        if (err := user_error(e)) is None or _full_error():
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _in_multirun() -> bool:
    from diversed.config.jobs import sweep_job  # Hydra's state, read only when a user error is reported

    return sweep_job() is not None


def hydra_task(task: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`task(cfg)` for `@hydra.main`: a user error prints its message alone on stderr and exits with
    status 2 (a SystemExit, which Hydra lets through). A bug, a job of a multirun (Hydra reports
    each failed job and goes on with the others), `runtime.verbose=true` and HYDRA_FULL_ERROR=1 keep
    Hydra's report with the traceback (exit status 1)."""

    @functools.wraps(task)  # Hydra names the job after the wrapped function's module
    def run(cfg: Any) -> Any:
        try:
            return task(cfg)
        except Exception as e:
            verbose = bool((cfg.get("runtime") or {}).get("verbose", False))
            if (err := user_error(e)) is None or verbose or _full_error() or _in_multirun():
                raise
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None

    return run
