"""The task's settings, declared by the tasks: `TaskSettings` (what every task takes) with each task's
own options as fields (`task_schema`: each against the type its class declares, `Task.options`), and
`EntrySettings`, what every entry point's settings share (the task, the pair, the runtime, the seed and
a paper preset, which holds one task's protocol).

The entry points' schemas build on `EntrySettings` (`sweep/settings.py`, `training/settings.py`); the
checking machinery is `config/schema.py`'s. It checks settings only: a task's data is checked where it
is read (`tasks/data.py`), its prompts against the pair's context by `tasks/context.py`.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import Field, create_model, field_validator, model_validator

from diversed import CONFIG_DIR
from diversed.config.keys import config_groups
from diversed.config.schema import NonNegativeInt, PositiveInt, RuntimeSettings, Settings
from diversed.models.pair import PairSettings
from diversed.tasks import TASKS, unknown_task


class TaskSettings(Settings):
    """What every task takes; a known task's own options (`Task.options`) are checked with them, each
    against the type it declares (`task_schema`)."""

    name: str
    split: str | None = None
    n_examples: PositiveInt | None = Field(None, description="null keeps every example")
    seed: int = 0
    skip_examples: NonNegativeInt = Field(
        0, description="leave out the first K of the seed's draw: rows none of n_examples=K's holds"
    )
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    num_few_shot: NonNegativeInt = 0
    chat_template: bool | Literal["auto"] = "auto"
    max_prompt_tokens: PositiveInt | None = None
    max_new_tokens: PositiveInt = 128
    stop: list[Annotated[str, Field(min_length=1)]] | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if (why := unknown_task(name)) is not None:  # the registered ones named, and how to load one
            raise ValueError(why)
        return name

    @model_validator(mode="wrap")
    @classmethod
    def _own_options(cls, values: Any, handler: Any) -> TaskSettings:
        task = TASKS.get(values.get("name")) if isinstance(values, dict) and cls is TaskSettings else None
        return handler(values) if task is None else task_schema(task).model_validate(values)


@functools.cache
def task_schema(task: type) -> type[TaskSettings]:
    """`TaskSettings` with the task class's own options (`Task.options`) as fields: each its declared
    type, default and help."""
    fields: dict[str, Any] = {
        name: (o.type, Field(o.default, description=o.help or None)) for name, o in task.options.items()
    }
    return create_model(f"{task.__name__}Settings", __base__=TaskSettings, **fields)


class EntrySettings(Settings):
    """What every entry point's settings share (task, pair, runtime, seed); a paper preset
    (configs/paper/<task>.yaml) holds one task's protocol, so another task under it would mix two
    protocols."""

    task: TaskSettings
    pair: PairSettings
    runtime: RuntimeSettings = RuntimeSettings()
    seed: int = 0
    paper_preset: str | None = None

    @model_validator(mode="after")
    def _one_protocol(self) -> EntrySettings:
        """Each hint names a preset that exists (`configs/paper/*.yaml`, `keys.config_groups`)."""
        preset, task = self.paper_preset, self.task.name
        papers = config_groups(str(CONFIG_DIR)).get("paper", ([], True))[0]
        listed = f"config group paper: {', '.join(papers)}"
        if preset and preset not in papers:
            raise ValueError(
                f"paper_preset={preset!r} is no paper protocol: choose one with +paper=<option> ({listed}), "
                "or leave paper_preset out"
            )
        if preset and preset != task:
            said = f"+paper={preset} is the {preset} protocol (its splits, baseline, scoring), but"
            if task in papers:
                raise ValueError(
                    f"{said} task={task} was set: for the {task} protocol use +paper={task} in place of "
                    f"+paper={preset} and task={task}"
                )
            raise ValueError(
                f"{said} task={task} was set, which has no paper protocol ({listed}): drop +paper={preset} "
                f"to run task={task} with its own settings, or drop what sets task={task} (task=..., an "
                f"+experiment=...) to run the {preset} protocol"
            )
        return self
