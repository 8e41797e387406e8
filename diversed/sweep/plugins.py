"""Plugins: modules of one's own that register methods (`methods.register`), tasks (`tasks.register_task`)
or both, loaded by one spelling on every entry point that reads methods or tasks (evaluate, train,
distill, report, plot, show, bench): `plugins=[my_pkg.mod]` (or `plugins=my_pkg.mod`), and by the
`diversed.methods` and `diversed.tasks` entry points. `plugins` is not a sweep axis: a multirun's jobs
load the same plugins (`plugins=[a],[b]` is refused).

The Hydra entry points (evaluate, train, distill) call `start()` before Hydra composes: it reads the
`plugins=...` of the command line, imports them, then puts what the registries define into Hydra's
ConfigStore (each knob's `sweep.<key>` with its default grid, `store_sweep_grids`; each registered task
without a packaged yaml, `tasks.store_task_configs`), so that a plugin's knob takes no `+`
(`sweep.my_knobs=[...]`; the `+sweep.my_knobs=` the README once asked for is taken as the same) and
`task=my` composes. The config keeps `plugins` (evaluate's schema loads them again, which does nothing
more). A config file may name plugins too, but those are imported after Hydra composes: their knobs'
keys then need a `+` and a task of theirs cannot be chosen by `task=<name>`: name them on the command
line instead. The readers (report, plot, show) and the bench take the same `plugins=...` words
(`parse_args`); the readers' older `--plugin MODULE` still works, with one line naming the new spelling.
A plugin that cannot be imported, or whose import fails, is a ConfigError naming it, before anything
loads. It registers nothing itself.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from diversed.errors import ConfigError
from diversed.sweep.methods import knobs, load_entry_points, on_register

_WORD = re.compile(r"\+{0,2}plugins=(.*)", re.S)  # plugins=..., +plugins=..., ++plugins=...


def load_plugins(modules: Iterable[str] | str = (), *, where: str = "plugins") -> None:
    """Import each module (each registers its methods or tasks on import), after the `diversed.methods`
    entry points; ConfigError naming the module (`where[i]`) that cannot be imported and the fix. The
    `diversed.tasks` entry points are loaded where tasks are looked up (`tasks.unknown_task`,
    `tasks.store_task_configs`): the readers (report, plot, show) load plugins without importing the
    tasks, hence torch (show on 100,000 records stays within its memory)."""
    load_entry_points()
    if isinstance(modules, str):
        modules = [modules]
    for i, name in enumerate(modules):
        given = f"{where} {name}" if where.startswith("-") else f"{where}[{i}]={name!r}"
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{given}: give a module's import name, e.g. plugins=[my_pkg.my_method]")
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(
                f"{given}: cannot import it ({type(e).__name__}: {e}); put the directory that holds "
                "it on PYTHONPATH, or install its package"
            ) from None
        except ConfigError:
            raise
        except Exception as e:  # its code failed (a knob that clashes, a syntax error): said, not a trace
            raise ConfigError(f"{given}: importing it failed: {type(e).__name__}: {e}") from None


def split_plugins(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the words of `argv` but its `plugins=...` ones, the modules those name): `plugins=[a,b]`,
    `plugins=a`, `plugins=a,b`, each word as often as given."""
    rest, modules = [], []
    for word in argv:
        found = _WORD.fullmatch(word)
        if found is None:
            rest.append(word)
            continue
        value = found[1].strip().strip("'\"")
        if "(" in value or "],[" in value.replace(" ", ""):
            raise ConfigError(
                f"{word}: plugins is not a sweep axis (every job loads the same plugins): give one list, "
                "plugins=[my_pkg.a,my_pkg.b]"
            )
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        if value.strip() in ("", "null", "None"):
            continue
        modules += [m.strip().strip("'\"") for m in value.split(",") if m.strip()]
    return rest, modules


_storing = False


def store_sweep_grids() -> None:
    """Put each registered knob's `sweep.<key>: <default grid>` into Hydra's ConfigStore (the group
    `sweep_knobs`, option `registered`: evaluate.yaml's optional default), and keep it current as methods
    register."""
    global _storing
    from hydra.core.config_store import ConfigStore

    node = {k.sweep: list(k.default) for k in knobs().values()}
    ConfigStore.instance().store(group="sweep_knobs", name="registered", node=node)
    if not _storing:
        _storing = True
        on_register(store_sweep_grids)


def prepare_hydra(plugins: Iterable[str] | str = ()) -> None:
    """Load `plugins`, then put the registered knobs' grids and tasks' configs into Hydra's ConfigStore:
    what composing our configs needs first (the entry points, `start`; tests and notebooks that compose
    with Hydra's `compose`)."""
    from diversed.tasks import store_task_configs  # torch-free at import (plot, show)

    load_plugins(plugins)
    store_sweep_grids()
    store_task_configs()


def start(argv: list[str] | None = None) -> None:
    """Before a Hydra entry point composes: the plugins its command line names (`plugins=...`, which is
    written back as a list, the config's type), loaded, and the ConfigStore filled (`prepare_hydra`).
    A plugin that cannot be imported ends the process with its error on stderr (exit status 2)."""
    argv = sys.argv if argv is None else argv
    try:
        rest, modules = split_plugins(argv[1:])
        prepare_hydra(modules)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    first = next((i for i, w in enumerate(argv[1:]) if _WORD.fullmatch(w)), None)
    if first is not None:  # one plugins= word, the list of them all, where the first one stood
        rest.insert(first, f"plugins=[{','.join(modules)}]")
    # A registered knob's key is in the composed config now: `+sweep.<key>=` (what a plugin's knob needed
    # before plugins loaded ahead of Hydra) would be refused by Hydra as adding a key that exists.
    keys = {f"+sweep.{k.sweep}=" for k in knobs().values()}
    argv[1:] = [w[1:] if any(w.startswith(key) for key in keys) else w for w in rest]


def add_plugin_option(parser: argparse.ArgumentParser) -> None:
    """The older `--plugin MODULE` (repeatable) on a reader's parser; `parse_args` takes `plugins=...`."""
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE", help=argparse.SUPPRESS)
    parser.epilog = (parser.epilog + "\n" if parser.epilog else "") + (
        "plugins=[my_pkg.my_method,...]: modules that register methods or tasks of one's own (README, "
        '"Add your own method"); the diversed.methods entry points are loaded anyway'
    )


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> Any:
    """`parser.parse_args` over `argv` (None: the command line) without its `plugins=...` words, then the
    plugins they name and those of `--plugin` loaded (one line on stderr names the new spelling), before
    the caller reads any record."""
    rest, modules = split_plugins(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(rest)
    older = list(getattr(args, "plugin", None) or [])
    if older:
        print(
            f"--plugin is deprecated: write plugins=[{','.join(older)}] (one spelling for every entry point)",
            file=sys.stderr,
        )
    load_plugins([*modules, *older])
    return args
