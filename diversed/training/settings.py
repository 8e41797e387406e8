"""Train's and distill's settings, declared by training: the trainer, optimizer, model (the head's
REINFORCE), data and head groups (`TrainSettings`), and the distillation's (`DistillSettings`), both on
what every entry point shares (`tasks/settings.EntrySettings`).

Ranges and combinations are checked here (reg_scale >= 0, a group baseline needs two samples per
prompt, a head's w_bounds are 0 <= lo < hi <= 1, the split the task is evaluated on neither trains nor
selects a checkpoint, ...); the names a setting chooses from are the modules' that act on them
(baselines and regulariser modes in `reinforce.py`, divergences and rollouts in `teacher.py`,
learning-rate schedules in `schedules.py`, head features in `models/heads.py`), which trust what is
checked here and do not check it again. `model.reward` is only checked to be a name here: which
metrics a task computes is the training module's check, at its first batch. The trainer's settings are
checked against this machine by `trainer.check_trainer`; `train.check_train` and
`distill.check_distill` check a config against these schemas (`config/schema.check_settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from diversed.config.schema import NonNegativeInt, PositiveInt, Settings, Temperature, Weight
from diversed.models.heads import FEATURES
from diversed.tasks.settings import EntrySettings, TaskSettings
from diversed.training.reinforce import BASELINES, OBJECTIVES, REG_MODES
from diversed.training.schedules import LR_SCHEDULES
from diversed.training.teacher import DIVERGENCES, ROLLOUTS

LIGHTNING_CKPT_NAMES = ("last", "best", "hpc", "registry")  # ckpt_path values Lightning resolves itself


class TrainerSettings(Settings):
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


class OptimizerSettings(Settings):
    lr: Annotated[float, Field(gt=0)] = 1e-3
    weight_decay: Annotated[float, Field(ge=0)] = 0.0


class ModelSettings(Settings):
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
    objective: Literal[OBJECTIVES] = "reinforce"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _group(self) -> ModelSettings:
        if self.objective == "reinforce" and self.baseline == "group" and self.num_samples < 2:
            raise ValueError("model.baseline=group needs model.num_samples >= 2 completions per prompt")
        if self.objective == "teacher_forced" and self.reg_mode == "adaptive":
            raise ValueError(
                "model.reg_mode=adaptive scales λ by the policy gradient, which model.objective="
                "teacher_forced does not have: set model.reg_mode=fixed (λ = model.reg_scale)"
            )
        return self


class DataSettings(Settings):
    train_split: str = "train"
    val_split: str = "validation"
    n_train: PositiveInt | None = None
    n_val: PositiveInt | None = None
    batch_size: PositiveInt = 16
    val_batch_size: PositiveInt = 64


class HeadSettings(Settings):
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


class TrainingSettings(EntrySettings):
    """What train and distill share; the split the task is evaluated on (task.split) must neither
    train nor select a checkpoint."""

    trainer: TrainerSettings
    data: DataSettings
    ckpt_path: str | None = None

    @field_validator("ckpt_path")
    @classmethod
    def _checkpoint(cls, path: str | None) -> str | None:
        """A file to resume from (its contents are checked against the pair: `check_checkpoint`)."""
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
    def _no_test_selection(self) -> TrainingSettings:
        _check_selection_split(self.task, self.data)
        return self

    @model_validator(mode="after")
    def _no_skip(self) -> TrainingSettings:
        """task.skip_examples picks evaluation rows; here it would drop train rows (data.n_train and
        data.n_val say how many) and leave test rows out of the check that no test row trains."""
        if self.task.skip_examples:
            raise ValueError(
                f"task.skip_examples={self.task.skip_examples} picks the rows a sweep scores, not train "
                "rows: leave it at 0 here (data.n_train and data.n_val say how many train rows)"
            )
        return self


class TrainSettings(TrainingSettings):
    model: ModelSettings
    head: HeadSettings = HeadSettings()

    @model_validator(mode="after")
    def _int8_in_float32(self) -> TrainSettings:
        quantized = {
            k: v for k, v in self.pair.model_dump().items() if k.endswith("_quantize") and v != "none"
        }
        if quantized and "16" in str(self.trainer.precision):
            name, how = next(iter(quantized.items()))
            raise ValueError(
                f"pair.{name}={how} with trainer.precision="
                f"{self.trainer.precision}: int8 layers take float32 activations, which autocast would "
                "make half: set trainer.precision=32-true (the head trains in fp32 anyway)"
            )
        return self


class DistillModelSettings(Settings):
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


class DistillSettings(TrainingSettings):
    distill: DistillModelSettings

    @model_validator(mode="after")
    def _float_draft(self) -> DistillSettings:
        if self.pair.draft_quantize != "none":
            raise ValueError(
                f"pair.draft_quantize={self.pair.draft_quantize}: distill trains the draft's float weights "
                "(int8 layers have none to train); drop it here, and set it where the distilled draft decodes"
            )
        if self.pair.target_quantize != "none":
            raise ValueError(
                f"pair.target_quantize={self.pair.target_quantize}: distill teaches the draft the float "
                "target's law (its samples and p); drop it here (an int8 target is another target)"
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
