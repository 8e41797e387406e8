"""The entry points' settings as typed schemas (pydantic), checked before anything is loaded.

`check_evaluate(cfg)` and `check_train(cfg)` validate a composed Hydra config: types (an N of
2.7 is not an int), ranges (n_examples >= 1, w in [0, 1], reg_scale >= 0, ...), known names
(methods, tasks, dtypes, forward paths), a task's own options (each against the type its class
declares, `Task.options`) and combinations (a group baseline needs two samples per
prompt; a CUDA device needs a GPU; a head's w_bounds are 0 <= lo < hi <= 1). `model.reward` is only
checked to be a name here: which metrics a task computes is the training module's check, at its
first batch. Every problem is reported at once in a `ConfigError` that
names the config key, the value given and what to set instead. Unknown keys are refused too, each
with the closest known key (`config_keys.py`): Hydra refuses a key that is not in the config, but
not one added with `+` (`+sweep.weight=[0.9]`), which would otherwise be carried along unread. A
section of another entry point (a preset holds train's, distill's and evaluate's) is checked for
unknown keys and otherwise ignored.

Evaluate's sweep schema is built from the registered methods (`sweep_settings()`): each knob's
`sweep.<key>` is a list whose values its `methods.Knob` checks (w in [0, 1], a cascade's rule one of
chow, diff, opt), by default the knob's default grid (which `config_keys.store_sweep_grids` also puts
into the composed config, so that the command line overrides it). `check_evaluate` first imports the config's
`plugins` (modules that register methods of one's own), so their knobs are checked as the built-in ones.
A list given as one value, as a Hydra multirun over values gives each job (`-m sweep.weights=0.3,0.7`),
is taken as the list of it, in the config the runner reads too.

It checks settings only: data files, the pair's files and the context length are checked by
`preflight.py`, still before any model weights are read. The names a setting chooses from are the
domain's, imported from the modules that act on them (methods in `methods.py`, baselines and
regulariser modes in `reinforce.py`, divergences and rollouts in `teacher.py`, learning-rate
schedules in `training/schedules.py`, head features in `heads.py`); the training modules trust what is
checked here and do not check it again.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from diversed.errors import ConfigError
from diversed.models.heads import FEATURES
from diversed.sweep.methods import METHODS, Knob, knobs, load_plugins
from diversed.sweep.preflight import LIGHTNING_CKPT_NAMES
from diversed.training.reinforce import BASELINES, REG_MODES
from diversed.training.schedules import LR_SCHEDULES
from diversed.training.teacher import DIVERGENCES, ROLLOUTS

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Weight = Annotated[float, Field(ge=0.0, le=1.0)]
Temperature = Annotated[float, Field(ge=0.0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False)  # config_keys.py refuses unknown keys


# ----------------------------------------------------------------------------- shared groups


class TaskSettings(_Model):
    """What every task takes; a known task's own options (`Task.options`) are checked with them, each
    against the type it declares (`task_schema`)."""

    name: str
    split: str | None = None
    n_examples: PositiveInt | None = Field(None, description="null keeps every example")
    seed: int = 0
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    num_few_shot: NonNegativeInt = 0
    chat_template: bool | Literal["auto"] = "auto"
    max_prompt_tokens: PositiveInt | None = None
    max_new_tokens: PositiveInt = 128
    stop: list[Annotated[str, Field(min_length=1)]] | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        from diversed.tasks import TASKS

        if name not in TASKS:
            raise ValueError(f"unknown task; choose from {sorted(TASKS)}")
        return name

    @model_validator(mode="wrap")
    @classmethod
    def _own_options(cls, values: Any, handler: Any) -> TaskSettings:
        from diversed.tasks import TASKS

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


class PairSettings(_Model):
    dtype: Literal["auto", "native", "config", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"
    forward: Literal["auto", "hf", "direct"] = "auto"
    draft_quantize: Literal["none", "int8"] = Field(
        "none",
        description="int8: the draft's linear layers in int8 (CPU, float32 or bf16; models/quantize.py)",
    )
    cpu_kernels: Literal["auto", "blas"] = Field(
        "auto",
        description="auto: a large model's linear layers on oneDNN's packed layout on CPU (float32, or bf16 "
        "where the CPU has bf16 instructions); blas: torch's F.linear (models/packed.py)",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        import torch

        kind = device.split(":")[0]
        if kind not in ("auto", "cpu", "cuda", "mps"):
            raise ValueError("use auto, cpu, cuda, cuda:N or mps")
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError("torch sees no GPU on this machine; use pair.device=cpu (or auto)")
        if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError("MPS is not available on this machine; use pair.device=cpu (or auto)")
        return device


class RuntimeSettings(_Model):
    threads: PositiveInt | None = Field(None, description="null leaves torch's default")
    malloc: Literal["keep", "system"] = "keep"  # config/runtime.keep_freed_memory
    progress: bool = True
    verbose: bool = False


# ----------------------------------------------------------------------------- evaluate


class SweepSettings(_Model):
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
                'it with plugins: [my_pkg.my_method] (README, "Add your own method")'
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


class EngineSettings(_Model):
    bonus_token: Literal["ensemble", "target"] = "ensemble"
    first_token: Literal["ensemble", "target"] = "ensemble"
    num_draft_tokens_schedule: Literal["constant", "heuristic"] = "constant"
    draft_confidence_threshold: Weight | None = None
    top_k: NonNegativeInt | None = Field(0, description="an integer >= 0; 0 or null: no top-k")
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = Field(1.0, description="in (0, 1]; 1.0: no top-p")


class TimingSettings(_Model):
    warmup: NonNegativeInt = 1
    repeats: NonNegativeInt = 5
    latency: bool = False
    latency_repeats: PositiveInt = 3
    latency_examples: PositiveInt | None = None


class _Entry(_Model):
    """What every entry point's settings share (task, pair, runtime, seed); a paper preset
    (configs/paper/<task>.yaml) holds one task's protocol, so another task under it would mix two
    protocols."""

    task: TaskSettings
    pair: PairSettings
    runtime: RuntimeSettings = RuntimeSettings()
    seed: int = 0
    paper_preset: str | None = None

    @model_validator(mode="after")
    def _one_protocol(self) -> _Entry:
        """Each hint names a preset that exists (`configs/paper/*.yaml`, `keys.config_groups`)."""
        from diversed import CONFIG_DIR
        from diversed.config.keys import config_groups

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


class EvaluateSettings(_Entry):
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


# ----------------------------------------------------------------------------- train


class TrainerSettings(_Model):
    max_steps: int = -1
    max_epochs: int | None = None
    val_check_interval: Annotated[float, Field(gt=0)] | None = None
    gradient_clip_val: Annotated[float, Field(ge=0)] | None = None
    strategy: Any = "auto"
    devices: Any = "auto"
    num_nodes: int = 1
    precision: Any = None  # Lightning's (32-true, bf16-mixed, ...)

    @model_validator(mode="after")
    def _processes(self) -> TrainerSettings:
        one = self.devices in (1, "1") or (isinstance(self.devices, list) and len(self.devices) == 1)
        if str(self.strategy).startswith(("ddp", "fsdp", "deepspeed")) and one and self.num_nodes == 1:
            raise ValueError(
                f"trainer.strategy={self.strategy} with trainer.devices={self.devices} and "
                "trainer.num_nodes=1 runs one process (an experiment's trainer.devices: 1 wins over "
                "trainer=ddp's): set trainer.devices=N (with trainer.accelerator=cpu for N CPU "
                "processes) or leave trainer=ddp out"
            )
        return self

    @model_validator(mode="after")
    def _length(self) -> TrainerSettings:
        if self.max_steps == -1 and not (self.max_epochs or 0) >= 1:
            raise ValueError(
                "training has no length: set trainer.max_steps >= 1 (or max_epochs >= 1 with max_steps=-1)"
            )
        if self.max_steps != -1 and self.max_steps < 1:
            raise ValueError(
                f"trainer.max_steps={self.max_steps} trains nothing and would export an untrained "
                "head: set trainer.max_steps >= 1"
            )
        return self


class OptimizerSettings(_Model):
    lr: Annotated[float, Field(gt=0)] = 1e-3
    weight_decay: Annotated[float, Field(ge=0)] = 0.0


class ModelSettings(_Model):
    optimizer: OptimizerSettings = OptimizerSettings()
    reg_scale: Annotated[float, Field(ge=0)] = 0.1
    reg_mode: Literal[REG_MODES] = "fixed"  # type: ignore[valid-type]
    baseline: Literal[BASELINES] = "running"  # type: ignore[valid-type]
    baseline_momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9
    baseline_constant: float = 1.0
    lr_schedule: Literal[LR_SCHEDULES] = "constant"  # type: ignore[valid-type]
    warmup_steps: NonNegativeInt = 0
    num_samples: PositiveInt = 1
    do_sample: bool = True
    temperature: Annotated[float, Field(gt=0)] = 1.0
    num_draft_tokens: PositiveInt = 5
    max_new_tokens: PositiveInt | None = None
    normalize_advantage: bool = False
    val_do_sample: bool = False
    val_temperature: Annotated[float, Field(gt=0)] = 1.0
    # which metrics a task computes is known once it loads: a name it lacks fails at the first batch
    reward: Annotated[str, Field(min_length=1)] = Field(
        "score", description="score, mean, or a metric the task computes (e.g. rougeL)"
    )
    teacher_forced_steps: NonNegativeInt = 0
    teacher_forced_lr: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _group(self) -> ModelSettings:
        if self.baseline == "group" and self.num_samples < 2:
            raise ValueError("model.baseline=group needs model.num_samples >= 2 completions per prompt")
        return self


class DataSettings(_Model):
    train_split: str = "train"
    val_split: str = "validation"
    n_train: PositiveInt | None = None
    n_val: PositiveInt | None = None
    batch_size: PositiveInt = 16
    val_batch_size: PositiveInt = 64


class HeadSettings(_Model):
    hidden_sizes: list[PositiveInt] = []
    features: list[Literal[FEATURES]] = []  # type: ignore[valid-type]
    normalize: bool = False  # the class's defaults (the paper's head); configs/head/*.yaml set their own
    w_bounds: tuple[Weight, Weight] = Field((0.0, 1.0), description="[lo, hi] with 0 <= lo < hi <= 1")

    @field_validator("w_bounds")
    @classmethod
    def _bounds(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        if not bounds[0] < bounds[1]:
            raise ValueError("w_bounds must be [lo, hi] with lo < hi")
        return bounds


class _Training(_Entry):
    """What train and distill share; the split the task is evaluated on (task.split) must neither
    train nor select a checkpoint."""

    trainer: TrainerSettings
    data: DataSettings
    ckpt_path: str | None = None

    @field_validator("ckpt_path")
    @classmethod
    def _checkpoint(cls, path: str | None) -> str | None:
        """A file to resume from (its contents are checked against the pair by preflight.check_checkpoint)."""
        if path is None or path in LIGHTNING_CKPT_NAMES:
            return path
        where = Path(path).expanduser()
        if where.is_dir():
            found = sorted(where.glob("*.ckpt")) or sorted(where.glob("checkpoints/*.ckpt"))
            example = found[-1] if found else where / "checkpoints" / "last.ckpt"
            raise ValueError(f"is a directory: give the checkpoint file, e.g. ckpt_path={example}")
        if not where.is_file():
            raise ValueError(
                "no such file: give a run's checkpoint (<run dir>/checkpoints/last.ckpt), "
                "or null to start afresh"
            )
        return path

    @model_validator(mode="after")
    def _no_test_selection(self) -> _Training:
        _check_selection_split(self.task, self.data)
        return self


class TrainSettings(_Training):
    model: ModelSettings
    head: HeadSettings = HeadSettings()

    @model_validator(mode="after")
    def _int8_in_float32(self) -> TrainSettings:
        if self.pair.draft_quantize != "none" and "16" in str(self.trainer.precision):
            raise ValueError(
                f"pair.draft_quantize={self.pair.draft_quantize} with trainer.precision="
                f"{self.trainer.precision}: int8 layers take float32 activations, which autocast would "
                "make half: set trainer.precision=32-true (the head trains in fp32 anyway)"
            )
        return self


class DistillModelSettings(_Model):
    optimizer: OptimizerSettings = OptimizerSettings()
    divergence: Literal[DIVERGENCES] = "forward_kl"  # type: ignore[valid-type]
    rollout: Literal[ROLLOUTS] = "draft"  # type: ignore[valid-type]
    mixed_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    temperature: Annotated[float, Field(gt=0)] = 1.0
    max_new_tokens: PositiveInt | None = None
    num_draft_tokens: PositiveInt = 5
    val_temperature: Temperature = 1.0
    lora: dict[str, Any] | None = None
    prompt_positions: Annotated[int, Field(ge=-1)] = 0
    freeze_layers: Annotated[int, Field(ge=0)] = 0
    top_k: PositiveInt | None = None
    reuse: bool = False
    sample_batch_size: PositiveInt = 64
    replay: list[str] = []
    lr_schedule: Literal[LR_SCHEDULES] = "constant"  # type: ignore[valid-type]
    warmup_steps: NonNegativeInt = 0

    @model_validator(mode="after")
    def _reuse(self) -> DistillModelSettings:
        if self.reuse and self.rollout != "target":
            raise ValueError(
                "distill.reuse draws each prompt's sample once: it needs distill.rollout=target (the "
                "draft's own samples change as it trains)"
            )
        if self.reuse and self.top_k is None:
            raise ValueError(
                "distill.reuse keeps the target's law at every scored slot: set distill.top_k (e.g. 256)"
            )
        if self.replay and not self.reuse:
            raise ValueError(
                "distill.replay mixes in samples drawn by other runs: it needs distill.reuse=true"
            )
        for path in self.replay:
            if not Path(path).is_file():
                raise ValueError(f"distill.replay: no file {path} (a run's teacher_samples.pt)")
        return self

    @field_validator("lora")
    @classmethod
    def _peft(cls, lora: dict[str, Any] | None) -> dict[str, Any] | None:
        if lora:
            import importlib.util

            if importlib.util.find_spec("peft") is None:
                raise ValueError(
                    "LoRA needs peft: pip install peft (or drop distill.lora to train the whole draft)"
                )
        return lora


class DistillSettings(_Training):
    distill: DistillModelSettings

    @model_validator(mode="after")
    def _float_draft(self) -> DistillSettings:
        if self.pair.draft_quantize != "none":
            raise ValueError(
                f"pair.draft_quantize={self.pair.draft_quantize}: distill trains the draft's float weights "
                "(int8 layers have none to train); drop it here, and set it where the distilled draft decodes"
            )
        return self


def _check_selection_split(task: TaskSettings, data: DataSettings) -> None:
    """The split a task is evaluated on (task.split) must neither train nor select a checkpoint;
    tasks without a validation split hold part of TRAIN out instead (data.val_split=holdout)."""
    if task.split is None:
        return
    for key in ("train_split", "val_split"):
        if getattr(data, key) == task.split:
            raise ValueError(
                f"data.{key}={task.split!r} is the split the task is evaluated on (task.split): its "
                "examples would train or select the checkpoint. Set data.val_split=holdout (data.n_val "
                "examples of the train split, left out of training) or another split"
            )


# ----------------------------------------------------------------------------- checking


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


def _check(schema: type[BaseModel], cfg: Any, entry: str) -> BaseModel:
    from diversed import CONFIG_DIR
    from diversed.config.keys import unknown_keys

    entries = (evaluate_settings(), TrainSettings, DistillSettings)
    sections = {
        key: field.annotation for entry_schema in entries for key, field in entry_schema.model_fields.items()
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


def check_evaluate(cfg: Any) -> EvaluateSettings:
    """Validate `python -m diversed.evaluate`'s config, after importing its `plugins` (the modules that
    register methods of one's own: their knobs are then settings too); ConfigError listing every problem."""
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
    _one_value_lists(cfg, evaluate_settings().model_fields["sweep"].annotation)
    return _check(evaluate_settings(), cfg, "diversed.evaluate")  # type: ignore[return-value]


def _one_value_lists(cfg: Any, sweep: Any) -> None:
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


def check_distill(cfg: Any) -> DistillSettings:
    """Validate `python -m diversed.distill`'s config; ConfigError listing every problem."""
    return _check(DistillSettings, cfg, "diversed.distill")  # type: ignore[return-value]


def check_train(cfg: Any) -> TrainSettings:
    """Validate `python -m diversed.train`'s config; ConfigError listing every problem."""
    return _check(TrainSettings, cfg, "diversed.train")  # type: ignore[return-value]
