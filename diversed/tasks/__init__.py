"""Task registry: a plain dict from names to task classes, `load_task`, and `option_names` (the
settings a task takes, for refusing unknown `task.*` keys before anything loads).

Each task is one file (gsm8k.py, cnndm.py, xsum.py, mbpp.py, toy.py) that declares its own options
(`Task.options`), with its config file `configs/task/<name>.yaml`. A task of one's own needs neither:
`register_task("my", MyTask)` in a module of one's own, loaded by `plugins=[my_pkg.my_task]` on the
command line (or an entry point of the `diversed.tasks` group), and `task=my` chooses it, its config
made from the class (`task_config`: every shared setting and its options with their defaults) and put
into Hydra's store (`store_task_configs`) where the package has no yaml for it (README, "Adding a
task"). It knows nothing of Hydra's composition beyond that store.

May import: decoding, files, config, models; tests/test_structure.py's MAY_IMPORT.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from diversed.config.entry_points import load_group
from diversed.config.keys import reads_keys
from diversed.errors import ConfigError
from diversed.tasks.base import Task, shared_parameters
from diversed.tasks.cnndm import CNNDailyMail
from diversed.tasks.gsm8k import GSM8K
from diversed.tasks.mbpp import MBPP
from diversed.tasks.toy import ToyCountTask, ToyTask
from diversed.tasks.xsum import XSum

TASKS: dict[str, type[Task]] = {
    "gsm8k": GSM8K,
    "cnndm": CNNDailyMail,
    "xsum": XSum,
    "mbpp": MBPP,
    "toy": ToyTask,
    "toy_count": ToyCountTask,
}


ENTRY_POINT_GROUP = "diversed.tasks"
_entry_points_loaded = False
_storing = False  # store_task_configs has run: each registration stores its task's config too
_FIX = (
    "a task of your own: register_task(name, cls) in a module of yours, loaded by "
    'plugins=[my_pkg.my_task] on the command line (README, "Adding a task")'
)


def register_task(name: str, cls: type[Task], *, replace: bool = False) -> type[Task]:
    """Add task class `cls` under `name` (returns it): `task=<name>` then chooses it, `task.<option>`
    sets its options. A name that is taken by another class is refused unless `replace`."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task takes a subclass of diversed.tasks.base.Task, got {cls!r}")
    if cls.name != name:
        raise ValueError(
            f"register_task({name!r}, {cls.__name__}): the class's name is {cls.name!r}, which its records "
            f"carry: set {cls.__name__}.name = {name!r}, or register it as {cls.name!r}"
        )
    old = TASKS.get(name)
    same = old is not None and (old.__module__, old.__qualname__) == (cls.__module__, cls.__qualname__)
    if old is not None and not replace and not same:  # (the same class: its module imported again)
        raise ValueError(
            f"a task named {name!r} is registered already ({old.__module__}.{old.__qualname__}): choose "
            "another name, or register_task(..., replace=True) to replace it"
        )
    TASKS[name] = cls
    if _storing:
        store_task_configs()
    return cls


def unregister_task(name: str) -> type[Task] | None:
    """Remove task `name` from the registry (a notebook's experiment undone); returns it, or None."""
    return TASKS.pop(name, None)


def load_entry_points() -> None:
    """Load the `diversed.tasks` entry points once: each names a module (which registers its tasks on
    import) or a `Task` class (registered here under its `name`)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for found in load_group(ENTRY_POINT_GROUP):
        if isinstance(found, type) and issubclass(found, Task) and TASKS.get(found.name) is not found:
            register_task(found.name, found)


def unknown_task(name: Any) -> str | None:
    """Why `name` is no task (None: it is one, the entry points loaded first): the registered ones
    named, and how to load a task of one's own."""
    if name not in TASKS:
        load_entry_points()
    if name in TASKS:
        return None
    return f"unknown task {name!r}; registered: {', '.join(sorted(TASKS))}. {_FIX[0].upper()}{_FIX[1:]}"


def task_config(name: str) -> dict[str, Any]:
    """The config of task `name` as `configs/task/<name>.yaml` would hold it: `load_task` as its target,
    every shared setting its `load` and constructor take, with its default (the class's
    `max_new_tokens`), and the task's own options with theirs."""
    cls = TASKS[name]
    node: dict[str, Any] = {"_target_": f"{__name__}.load_task", "name": name}
    for function in (cls.load, cls.__init__):
        for param in inspect.signature(function).parameters.values():
            if param.name in shared_parameters() and param.name not in node:
                node[param.name] = None if param.default is param.empty else param.default
    node["max_new_tokens"] = cls.max_new_tokens
    node |= {option: o.default for option, o in cls.options.items()}
    return node


def store_task_configs() -> None:
    """Put the config of each registered task that has no `configs/task/<name>.yaml` into Hydra's
    ConfigStore (group `task`), so that `task=<name>` composes without a file in the package; from
    then on each registration stores its task's too; the `diversed.tasks` entry points are loaded first."""
    global _storing
    from hydra.core.config_store import ConfigStore

    load_entry_points()
    _storing = True

    packaged = Path(__file__).resolve().parents[1] / "configs" / "task"
    for name in TASKS:
        if not (packaged / f"{name}.yaml").is_file():
            ConfigStore.instance().store(group="task", name=name, node=task_config(name))


@reads_keys(lambda node: option_names(node.get("name")))  # config.keys: the task's own options
def load_task(
    name: str,
    *,
    split: str | None = None,
    data_files: Any = None,
    n_examples: int | None = None,
    **options: Any,
) -> Task:
    """Build task `name` (a key of `TASKS`) with its examples loaded; `options` go to its `load`."""
    if (why := unknown_task(name)) is not None:
        raise ConfigError(why)
    if not options.get("skip_examples"):  # 0, the default: a task whose own `load` predates it still loads
        options.pop("skip_examples", None)
    elif not _takes(TASKS[name].load, "skip_examples"):
        raise ConfigError(_no_skip(name))
    task = TASKS[name].load(split=split, data_files=data_files, n_examples=n_examples, **options)
    if task.source.get("skip_examples", 0) != options.get("skip_examples", 0):  # a load that dropped it
        raise ConfigError(_no_skip(name))
    return task


def _takes(function: Any, name: str) -> bool:
    """Whether `function` takes keyword `name`, by name or through **kwargs it passes on."""
    params = inspect.signature(function).parameters.values()
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _no_skip(name: str) -> str:
    return (
        f"task {name!r} (its class {TASKS[name].__name__}) has a `load` of its own that does not apply "
        "skip_examples: give it `skip_examples: int = 0` and pass it to subset_indices(skip=) "
        "(tasks/data.py) and `skipped()` into its source, or pass it on to Task.load; or leave "
        "task.skip_examples at 0"
    )


def read_task(name: str, **kwargs: Any) -> Task:
    """`load_task` for a caller that only reads or encodes the task's rows, or decodes without
    scoring: a task's code-execution opt-in (MBPP's) is not asked (`unscored_options`)."""
    return load_task(name, **unscored_options(name), **kwargs)


def unscored_options(name: str | None) -> dict[str, Any]:
    """What task `name` is built with by a caller that runs none of the code it completes (reading,
    encoding, decoding unscored, scoring references): its code-execution opt-in (MBPP's) given, since
    nothing is run; {} for a task without one."""
    return {"allow_code_execution": True} if "allow_code_execution" in (option_names(name) or ()) else {}


def option_names(name: str | None) -> set[str] | None:
    """The settings task `name` takes (the keys of its `task:` config): `load_task`'s name, what every
    task takes (`shared_parameters`) and the task's own options (`Task.options`). None for an unknown
    task (the schema names that)."""
    if name not in TASKS:
        return None
    return {"name", *shared_parameters(), *TASKS[name].options}
