"""`python -m diversed.distill +experiment=distill_toy`: fine-tune the DRAFT towards the frozen target.

`distill(cfg)` checks the settings (`check_distill`: `training/settings.py`), the trainer's against this
machine (`trainer.check_trainer`), the data and the pair's files, then
fits the module (`training/draft_module.py`: on-policy distillation in the style of DistillSpec,
its divergences and rollouts) and saves the best draft, which `finetuned_draft` evaluates with
lossless SD (`sweep.draft_models`). A Ctrl-C ends as one line naming the latest checkpoint and the
`ckpt_path=` that resumes from it (exit status 130). Tests call `distill(cfg)`; `main` is the thin
Hydra wrapper.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from diversed import CONFIG_DIR
from diversed.config.schema import check_settings
from diversed.errors import hydra_task, on_interrupt
from diversed.sweep.plugins import load_plugins, start
from diversed.sweep.settings import evaluate_settings
from diversed.training.checkpoints import check_checkpoint, model_shapes
from diversed.training.settings import DistillSettings, TrainSettings
from diversed.training.trainer import check_trainer, fit, prepare_training, saved_training

log = logging.getLogger(__name__)


def check_distill(cfg: Any) -> DistillSettings:
    """Validate `python -m diversed.distill`'s config (`training/settings.DistillSettings`; evaluate's and
    train's sections, which a preset holds too, checked for unknown keys); ConfigError listing every
    problem."""
    others = (evaluate_settings(), TrainSettings)
    return check_settings(DistillSettings, cfg, "diversed.distill", others)  # type: ignore[return-value]


def distill(cfg: DictConfig) -> dict[str, Any]:
    """Check the data and the pair's files, fit, and save the best draft; returns its directory
    and the last metrics."""
    load_plugins(cfg.get("plugins") or [])  # a config's (the command line's are loaded: `start`)
    check_distill(cfg)
    check_trainer(cfg, "diversed.distill")  # the trainer's settings against this machine

    def fits(card: Any) -> None:  # ckpt_path: readable, and the draft's shapes (safetensors headers)
        expected = {f"draft.{k}": shape for k, shape in model_shapes(card, "draft").items()}
        check_checkpoint(cfg.get("ckpt_path"), expected, "draft", weights_only=False)

    with on_interrupt(lambda: saved_training(cfg)):  # (a Ctrl-C while fitting: fit's own line)
        datamodule, pair = prepare_training(cfg, cfg.distill.get("max_new_tokens"), check_resume=fits)
        model = hydra.utils.instantiate(cfg.distill, pair=pair)
        model.samples_file = Path(cfg.paths.output_dir) / "teacher_samples.pt"
        run = fit(
            cfg, model, datamodule, weights_only=False, job_type="distill"
        )  # ... and the best draft exported
    if run.is_global_zero:
        out = run.exported
        log.info(
            f"Saved the distilled draft to {out} (use it as pair.draft={out} or sweep.draft_models=[{out}])"
        )
    return {"metrics": run.metrics, "draft_dir": str(run.exported), "best_checkpoint": run.best}


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="distill")
@hydra_task
def _main(cfg: DictConfig) -> float | None:
    result = distill(cfg)
    print(result["draft_dir"])
    value = result["metrics"].get("val/acceptance_rate", math.nan)
    return None if math.isnan(value) else value


def main() -> None:
    """`python -m diversed.distill`: the plugins the command line names loaded, then Hydra composes."""
    start()
    _main()


if __name__ == "__main__":
    main()
