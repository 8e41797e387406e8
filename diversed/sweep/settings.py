"""Evaluate's settings, declared by the sweep: `SweepSettings` (`sweep.*`), `EngineSettings`,
`TimingSettings` and `EvaluateSettings` (with `plugins`, the modules that register methods of one's own).

The sweep schema is built from the registered methods (`sweep_settings()`): each knob's `sweep.<key>`
is a list whose values its `methods.Knob` checks (w in [0, 1], a cascade's rule one of chow, diff, opt),
by default the knob's default grid (which Hydra's store also puts into the composed config, so that the
command line overrides it). `evaluate_schema(cfg)` first imports the config's `plugins`, so their
knobs are checked as the built-in ones, and takes a list given as one value, as a Hydra multirun over
values gives each job (`-m sweep.weights=0.3,0.7`), as the list of it, in the config the runner reads
too. `evaluate.check_evaluate` checks a config against it (`config/schema.check_settings`).

It checks settings only: the heads', drafts' and context's checks need the files (`preflight.py`,
`tasks/context.py`).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, create_model, field_validator

from diversed.config.schema import NonNegativeInt, PositiveInt, Settings, Temperature, Weight
from diversed.errors import ConfigError
from diversed.sweep.methods import METHODS, Knob, knobs
from diversed.sweep.plugins import load_plugins
from diversed.tasks.settings import EntrySettings


class SweepSettings(Settings):
    """`sweep.*` but the methods' knobs: `sweep_settings()` adds one list per registered knob."""

    methods: Annotated[list[str], Field(min_length=1)]
    draft_lengths: Annotated[list[PositiveInt], Field(min_length=1)]
    temperatures: Annotated[list[Temperature], Field(min_length=1)]
    allow_other_pair_heads: bool = False
    batch_size: PositiveInt = 16
    batch_by_length: bool = False
    # each batch's prompt pass kept across points, up to this many GB (decoding/prompt_cache.py); 0: off
    prompt_cache_gb: Annotated[float, Field(ge=0)] = 0.0
    token_w: bool = False
    num_seeds: PositiveInt = 1
    dry_run: bool = False
    reuse_siblings: bool = True  # a multirun job copies the points a sibling job decoded (sweep/siblings.py)

    @field_validator("methods")
    @classmethod
    def _methods(cls, methods: list[str]) -> list[str]:
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ValueError(
                f"unknown methods {unknown}; choose from {list(METHODS)}, or register your own and load "
                'it with plugins=[my_pkg.my_method] (README, "Add your own method")'
            )
        return methods


def sweep_settings() -> type[SweepSettings]:
    """`SweepSettings` with, per registered knob, its `sweep.<key>`: a list of the knob's type, each value
    checked against its range or choices (`Knob.check`), by default its default grid. Built when asked,
    since methods of one's own register at runtime."""
    return _sweep_model(tuple(knobs().values()))


@functools.cache
def _sweep_model(registered: tuple[Knob, ...]) -> type[SweepSettings]:
    taken = [k.sweep for k in registered if k.sweep in SweepSettings.model_fields]
    if taken:
        raise ConfigError(
            f"a registered knob's sweep key {taken} is one of sweep's own settings: give the knob "
            "another sweep key"
        )
    fields: dict[str, Any] = {
        k.sweep: (
            list[Annotated[k.type, AfterValidator(k.check)]],  # type: ignore[name-defined]
            Field(list(k.default), description=f"{k.symbol}: {k.label}" if k.label else k.symbol),
        )
        for k in registered
    }
    return create_model("SweepSettings", __base__=SweepSettings, **fields)


class EngineSettings(Settings):
    bonus_token: Literal["ensemble", "target"] = "ensemble"
    first_token: Literal["ensemble", "target"] = "ensemble"
    num_draft_tokens_schedule: Literal["constant", "heuristic"] = "constant"
    draft_confidence_threshold: Weight | None = None
    top_k: NonNegativeInt | None = Field(0, description="an integer >= 0; 0 or null: no top-k")
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = Field(1.0, description="in (0, 1]; 1.0: no top-p")


class TimingSettings(Settings):
    warmup: NonNegativeInt = 1
    repeats: NonNegativeInt = 5
    latency: bool = False
    latency_repeats: PositiveInt = 3
    latency_examples: PositiveInt | None = None


class EvaluateSettings(EntrySettings):
    sweep: SweepSettings
    engine: EngineSettings = EngineSettings()
    timing: TimingSettings = TimingSettings()
    plugins: list[str] = Field([], description="modules that register methods of one's own, imported first")


def evaluate_settings() -> type[EvaluateSettings]:
    """`EvaluateSettings` whose sweep has the registered knobs (`sweep_settings`)."""
    return _evaluate_model(sweep_settings())


@functools.cache
def _evaluate_model(sweep: type[SweepSettings]) -> type[EvaluateSettings]:
    return create_model("EvaluateSettings", __base__=EvaluateSettings, sweep=(sweep, ...))


def evaluate_schema(cfg: Any) -> type[EvaluateSettings]:
    """The schema of `python -m diversed.evaluate`'s config, after importing its `plugins` (the modules
    that register methods of one's own: their knobs are then settings too) and making each of sweep's
    lists given as one value a list of it (`one_value_lists`); ConfigError for a bad `plugins`."""
    plugins = cfg.get("plugins") if hasattr(cfg, "get") else None
    if plugins is not None and (isinstance(plugins, str) or not hasattr(plugins, "__iter__")):
        raise ConfigError(
            f"bad settings for diversed.evaluate, nothing was loaded:\n  plugins={plugins!r}: give a "
            "list of modules, e.g. plugins=[my_pkg.my_method]"
        )
    try:
        load_plugins(list(plugins or []))
    except ConfigError as e:
        raise ConfigError(f"bad settings for diversed.evaluate, nothing was loaded:\n  {e}") from None
    one_value_lists(cfg, evaluate_settings().model_fields["sweep"].annotation)
    return evaluate_settings()


def one_value_lists(cfg: Any, sweep: Any) -> None:
    """Each of sweep's lists given as one value made a list of it, in `cfg` itself (which the runner
    reads): a Hydra multirun over values, `-m sweep.weights=0.3,0.7 sweep.draft_lengths=3,5`, gives
    each job one number where the grid takes a list, so each job sweeps `[0.3]` and `[3]`."""
    section = cfg.get("sweep") if hasattr(cfg, "get") else None
    if section is None or not hasattr(section, "keys"):
        return
    for name, field in sweep.model_fields.items():
        value = section.get(name)
        one = isinstance(value, (str, int, float)) and not isinstance(value, bool)  # true: refused, no list
        if getattr(field.annotation, "__origin__", None) is list and one:
            section[name] = [value]
