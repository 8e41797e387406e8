"""`python -m diversed.train +experiment=toy`: train a DIVERSED weight head.

`train(cfg)` checks every setting (`schema.check_train`) and the trainer's against this machine
(`runtime.check_trainer`: accelerator, devices, strategy, precision), loads the data and describes the
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
from diversed.config.runtime import check_trainer, fit, prepare_training, saved_training
from diversed.config.schema import check_train
from diversed.errors import hydra_task, on_interrupt
from diversed.sweep.preflight import check_checkpoint
from diversed.training.head_module import build_head, head_shapes

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Check the settings, load the data and describe the pair (no weights yet), then instantiate
    pair, head, module, loggers, callbacks and trainer; fit; save last.ckpt; export the best head."""
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
def main(cfg: DictConfig) -> float | None:
    result = train(cfg)
    print(result["head_dir"])
    value = result["metrics"].get(cfg.get("optimized_metric") or "", math.nan)
    return None if math.isnan(value) else value


if __name__ == "__main__":
    main()
