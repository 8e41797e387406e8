"""The user's errors, apart from bugs, and how an entry point reports them: input the user fixes
(a setting, a data file, a model directory, the network), each message naming the problem and the
fix, is printed alone on stderr with exit status 2; anything else is a bug and keeps its traceback.
A Ctrl-C is one line too, saying what was saved and how to resume, with exit status 130.

- `UserError`: the mark. Each error below is also the builtin error it refines, so
  `except ValueError` or `except FileNotFoundError` still catches it.
- `ConfigError(UserError, ValueError)`: a setting is wrong (`config/schema.py` checks the entry points'
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
- `on_interrupt(say)`: a block whose Ctrl-C ends as `interrupted: <say()>` alone on stderr, exit
  status 130 (`cli` and `hydra_task` print it), instead of a traceback: the entry point says what it
  has saved by then and how to resume (evaluate: the grid points in its run directory; train and
  distill: the last checkpoint and `ckpt_path=`). Lightning's own Ctrl-C handling (it exits with
  status 1) is turned back into a KeyboardInterrupt by `training/trainer.fit`.
- `when_refused(undo)`: what runs when a user error stops a Hydra entry point, before its message is
  printed: `jobs.LeaveNothingWhenRefused` removes the run directory Hydra made before the job's own
  code ran (a refused run leaves no folder behind).

`HYDRA_FULL_ERROR=1` keeps the traceback of a user error too (and `runtime.verbose=true` in a Hydra
entry point). The modules decide what to raise; this module depends on nothing of the project's,
so every module may import it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any


class UserError(Exception):
    """Bad input, not a bug: the message says what is wrong and what to do."""


class ConfigError(UserError, ValueError):
    """A setting is wrong; the message names each bad key and the fix."""


class MissingFile(UserError, FileNotFoundError):
    """A path given does not exist, or does not hold what it should."""


class MissingPackage(UserError, ImportError):
    """An optional package is needed for what was asked (the message says how to install it)."""


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C, with the one line that says what was saved by then and how to resume."""


# ----------------------------------------------------------------------------- interrupts and refusals

INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


@contextlib.contextmanager
def on_interrupt(say: Callable[[], str]) -> Iterator[None]:
    """While the block runs, a Ctrl-C (KeyboardInterrupt) comes out as `Interrupted(say())`: what the
    entry point has saved when the key is pressed and how to resume. An inner block's line wins."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        try:
            line = say()
        except Exception as e:  # what was saved cannot be told: say so in the line, not a traceback
            line = f"what was saved could not be read ({type(e).__name__}: {e})"
        raise Interrupted(line) from None


def _say_interrupted(e: KeyboardInterrupt) -> None:
    """The one line of a Ctrl-C, once (not from each process of a distributed run)."""
    if os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0":
        said = str(e) if isinstance(e, Interrupted) and str(e) else "stopped by Ctrl-C before it finished"
        print(f"interrupted: {said}", file=sys.stderr)


_refusal_hooks: list[Callable[[], None]] = []


def when_refused(undo: Callable[[], None]) -> Callable[[], None]:
    """Have `undo()` run when a user error stops a Hydra entry point (`hydra_task`, once, before the
    message is printed); returns the function that takes it back (the run went on)."""
    _refusal_hooks.append(undo)
    return lambda: _refusal_hooks.remove(undo) if undo in _refusal_hooks else None


def refused() -> None:
    """Run (and forget) every `when_refused` hook; one that fails is named on stderr, not raised
    (the user's message comes next)."""
    while _refusal_hooks:
        undo = _refusal_hooks.pop()
        try:
            undo()
        except Exception as e:
            print(
                f"warning: could not undo what the refused run set up ({type(e).__name__}: {e})",
                file=sys.stderr,
            )


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
    callers, not the shell); 2 with a user error's message alone on stderr; 130 with one line after a
    Ctrl-C. A bug raises."""
    try:
        run(argv)
    except KeyboardInterrupt as e:
        if _full_error():
            raise
        _say_interrupted(e)
        return INTERRUPTED_STATUS
    except Exception as e:
        if (err := user_error(e)) is None or _full_error():
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _in_multirun() -> bool:
    """Whether this is a job of a Hydra multirun (Hydra's state; False outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:  # not under Hydra (tests call the task functions directly)
        return False


def hydra_task(task: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`task(cfg)` for `@hydra.main`: a user error prints its message alone on stderr and exits with
    status 2 (a SystemExit, which Hydra lets through), after the `when_refused` hooks; a Ctrl-C prints
    one line (`on_interrupt`) and exits with status 130, a multirun's other jobs not started. A bug, a
    job of a multirun (Hydra reports each failed job and goes on with the others),
    `runtime.verbose=true` and HYDRA_FULL_ERROR=1 keep Hydra's report with the traceback (exit status 1)."""

    @functools.wraps(task)  # Hydra names the job after the wrapped function's module
    def run(cfg: Any) -> Any:
        try:
            return task(cfg)
        except KeyboardInterrupt as e:
            if _full_error():
                raise
            _say_interrupted(e)
            raise SystemExit(INTERRUPTED_STATUS) from None
        except Exception as e:
            verbose = bool((cfg.get("runtime") or {}).get("verbose", False))
            if (err := user_error(e)) is None or verbose or _full_error() or _in_multirun():
                raise
            refused()
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        finally:
            _refusal_hooks.clear()  # this run's: over, however it ended (a later run registers its own)

    return run
