"""Task registry: a plain dict from names to task classes, `load_task`, and `option_names` (the
settings a task takes, for refusing unknown `task.*` keys before anything loads).

Each task is one file (gsm8k.py, cnndm.py, xsum.py, mbpp.py, toy.py) that declares its own options
(`Task.options`); a new task adds its import and one line to `TASKS`, and its config file
`configs/task/<name>.yaml`.
"""

from __future__ import annotations

from typing import Any

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


def load_task(
    name: str,
    *,
    split: str | None = None,
    data_files: Any = None,
    n_examples: int | None = None,
    **options: Any,
) -> Task:
    """Build task `name` (a key of `TASKS`) with its examples loaded; `options` go to its `load`."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name].load(split=split, data_files=data_files, n_examples=n_examples, **options)


def option_names(name: str | None) -> set[str] | None:
    """The settings task `name` takes (the keys of its `task:` config): `load_task`'s name, what every
    task takes (`shared_parameters`) and the task's own options (`Task.options`). None for an unknown
    task (the schema names that)."""
    if name not in TASKS:
        return None
    return {"name", *shared_parameters(), *TASKS[name].options}
