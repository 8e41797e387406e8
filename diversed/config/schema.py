"""The settings machinery: typed schemas (pydantic) that refuse bad input before anything loads.

Each entry point's settings are declared by their owners, from `Settings` and the types here: the task's
(`tasks/settings.py`: `TaskSettings`, each task's own options against the types its class declares, and
`EntrySettings`, what every entry point shares), the pair's (`models/pair.PairSettings`), the sweep's
(`sweep/settings.py`: sweep, engine, timing, `EvaluateSettings`) and training's (`training/settings.py`:
trainer, optimizer, model, data, head, `TrainSettings`, `DistillSettings`). The entry points check a
composed Hydra config against them (`evaluate.check_evaluate`, `train.check_train`,
`distill.check_distill`) with `check_settings`: types (an N of 2.7 is not an int), ranges, known names
and combinations, every problem reported at once in a `ConfigError` that names the config key, the value
given and what to set instead (a field's `description` added where it has one). Unknown keys are refused
too, each with the closest known key (`keys.py`): Hydra refuses a key that is not in the config, but not
one added with `+` (`+sweep.weight=[0.9]`), which would otherwise be carried along unread. A section of
another entry point (a preset holds train's, distill's and evaluate's: `others`) is checked for unknown
keys and otherwise ignored.

It checks settings only, and knows no model, task, training or sweep: the names a setting chooses from
are its owner's; data files, the pair's files and the context length are checked later, still before
any model weights are read (`sweep/preflight.py`, `tasks/context.py`, `training/checkpoints.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diversed import CONFIG_DIR
from diversed.config.keys import unknown_keys
from diversed.errors import ConfigError

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Weight = Annotated[float, Field(ge=0.0, le=1.0)]
Temperature = Annotated[float, Field(ge=0.0)]


class Settings(BaseModel):
    """The base of every settings schema: keys it does not declare are left to `keys.py` (which refuses
    the unknown ones with a hint), values are coerced where pydantic's lax mode does."""

    model_config = ConfigDict(extra="ignore", strict=False)


class RuntimeSettings(Settings):
    threads: PositiveInt | None = Field(None, description="null leaves torch's default")
    malloc: Literal["keep", "system"] = "keep"  # config/runtime.keep_freed_memory
    progress: bool = True
    verbose: bool = False


# ----------------------------------------------------------------------------- checking


def check_settings(
    schema: type[BaseModel], cfg: Any, entry: str, others: Sequence[type[BaseModel]] = ()
) -> BaseModel:
    """`cfg` validated by `schema` (entry point `entry`, e.g. "diversed.train"), its unknown keys refused
    with the closest known one, every problem in one ConfigError; the sections of the `others` (the
    other entry points' schemas, which a preset may hold too) are known keys, checked for unknown keys
    within them and otherwise ignored."""
    sections = {
        key: field.annotation
        for entry_schema in (schema, *others)
        for key, field in entry_schema.model_fields.items()
    }
    lines = unknown_keys(cfg, sections, CONFIG_DIR)
    values = _container(cfg, schema)
    try:
        settings = schema.model_validate(values)
    except ValidationError as e:
        for err in e.errors():
            key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
            value = err.get("input")
            message = err["msg"].removeprefix("Value error, ")
            hint = _description(schema, err["loc"])
            if isinstance(value, dict):  # a check across keys of a group: its message names them
                lines.append(f"  {message}")
            else:
                lines.append(f"  {key}={value!r}: {message}" + (f" ({hint})" if hint else ""))
    if lines:
        raise ConfigError(f"bad settings for {entry}, nothing was loaded:\n" + "\n".join(lines)) from None
    return settings


def _container(cfg: Any, schema: type[BaseModel]) -> dict[str, Any]:
    """The schema's top-level keys of `cfg` as plain values, resolved where they can be (paths that
    need Hydra's runtime, such as the output directory, are left as they are)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(cfg, DictConfig):
        return dict(cfg)
    out = {}
    for key in schema.model_fields:
        if key not in cfg:
            continue
        node = cfg[key]
        if not isinstance(node, DictConfig):
            out[key] = OmegaConf.to_container(OmegaConf.create({"v": node}), resolve=True)["v"]
            continue
        try:
            out[key] = OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException:
            out[key] = OmegaConf.to_container(node, resolve=False)
    return out


def _description(schema: type[BaseModel], loc: tuple) -> str | None:
    """The `description` of the field at `loc`, if the schema has one."""
    model: Any = schema
    description = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        model, description = fields[part].annotation, fields[part].description
    return description
