"""Learning-rate schedules of the training modules: their names (what the settings accept) and what a
module's `configure_optimizers` returns. Imports neither Lightning nor transformers at import time, so
the settings schema reads `LR_SCHEDULES` without the training stack.
"""

from __future__ import annotations

from typing import Any

LR_SCHEDULES = ("constant", "cosine", "linear")  # the settings' names (`settings.py` reads them from here)


def optimizers(module: Any, optimizer: Any, schedule: str = "constant", warmup_steps: int = 0) -> Any:
    """`optimizer` alone, or with transformers' schedule stepped every optimizer step: linear
    warm-up over `warmup_steps`, then constant, cosine or linear decay to 0 over the run's steps
    (max_steps, or epochs × batches per epoch). `schedule` is one of `LR_SCHEDULES`."""
    if schedule == "constant" and not warmup_steps:
        return optimizer
    from transformers import get_scheduler

    name = "constant_with_warmup" if schedule == "constant" else schedule
    total = int(module.trainer.estimated_stepping_batches)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
