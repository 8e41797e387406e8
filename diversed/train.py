"""`python -m diversed.train +experiment=toy`: train a DIVERSED weight head.

`train(cfg)` checks every setting (`check_train`: `training/settings.py`) and the trainer's against this
machine (`trainer.check_trainer`: accelerator, devices, strategy, precision), loads the data and describes the
pair (no weights yet), then instantiates pair, head, module (`training/head_module.py`: the algorithm),
loggers, callbacks and trainer; fits; saves last.ckpt and exports the best head. A Ctrl-C ends as
one line naming the latest checkpoint and the `ckpt_path=` that resumes from it (exit status 130).
Tests call `train(cfg)` with a composed config; `main` is the thin Hydra wrapper.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import hydra
from omegaconf import DictConfig

from diversed import CONFIG_DIR
from diversed.config.schema import check_settings
from diversed.errors import hydra_task, on_interrupt
from diversed.sweep.plugins import load_plugins, start
from diversed.sweep.settings import evaluate_settings
from diversed.training.checkpoints import check_checkpoint
from diversed.training.head_module import build_head, head_shapes
from diversed.training.settings import DistillSettings, TrainSettings
from diversed.training.trainer import check_trainer, fit, prepare_training, saved_training

log = logging.getLogger(__name__)


def check_train(cfg: Any) -> TrainSettings:
    """Validate `python -m diversed.train`'s config (`training/settings.TrainSettings`; evaluate's and
    distill's sections, which a preset holds too, checked for unknown keys); ConfigError listing every
    problem."""
    others = (evaluate_settings(), DistillSettings)
    return check_settings(TrainSettings, cfg, "diversed.train", others)  # type: ignore[return-value]


def train(cfg: DictConfig) -> dict[str, Any]:
    """Check the settings, load the data and describe the pair (no weights yet), then instantiate
    pair, head, module, loggers, callbacks and trainer; fit; save last.ckpt; export the best head."""
    load_plugins(cfg.get("plugins") or [])  # a config's (the command line's are loaded: `start`)
    check_train(cfg)  # every setting, before anything is read
    check_trainer(cfg, "diversed.train")  # ... and the trainer's against this machine

    def fits(card: Any) -> None:  # ckpt_path: readable, and a head of this pair's shapes (before the weights)
        expected = {} if card is None else head_shapes(hydra.utils.instantiate(cfg.head), card)
        check_checkpoint(cfg.get("ckpt_path"), expected, "head", weights_only=True)

    with on_interrupt(lambda: saved_training(cfg)):  # (a Ctrl-C while fitting: fit's own line)
        datamodule, pair = prepare_training(cfg, cfg.model.get("max_new_tokens"), check_resume=fits)
        head = build_head(hydra.utils.instantiate(cfg.head), pair, cfg.task.name)
        model = hydra.utils.instantiate(cfg.model, head=head, pair=pair)
        run = fit(cfg, model, datamodule)  # ... and the best head exported to <run dir>/head
    if run.is_global_zero:
        log.info(f"Exported the head to {run.exported}")
    return {"metrics": run.metrics, "head_dir": str(run.exported), "best_checkpoint": run.best}


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
@hydra_task
def _main(cfg: DictConfig) -> float | None:
    result = train(cfg)
    print(result["head_dir"])
    value = result["metrics"].get(cfg.get("optimized_metric") or "", math.nan)
    return None if math.isnan(value) else value


def main() -> None:
    """`python -m diversed.train`: the plugins the command line names loaded, then Hydra composes."""
    start()
    _main()


if __name__ == "__main__":
    main()
