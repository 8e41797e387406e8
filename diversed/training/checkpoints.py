"""What makes a resumed training run the run it continues, and how its checkpoints are written
(train and distill alike: `trainer.fit` adds `StepSeeds` and `AtomicCheckpointIO` to every run,
`configs/callbacks/default.yaml` names `LastCheckpoint`), and whether a checkpoint given to resume
from fits the pair.

- `StepSeeds`, a Lightning callback: each training batch draws its randomness (torch on the CPU and
  every GPU, python's `random`, numpy: rollouts, dropout, drawn prompt positions) from generators
  seeded by (run seed, optimizer step, batch index, process rank), and each validation from (run
  seed, rank). No generator state has to be in a checkpoint: a run resumed at any step draws what
  the uninterrupted run drew there, every process of a distributed run included, and a validation
  (sampled rollouts) neither depends on nor moves training's draws; every validation draws the
  same numbers, so two validations differ by the weights alone. The rest of the position is kept
  by Lightning: the loops' counters, the optimizer, the learning-rate schedule, the module's
  buffers (the running baseline), the checkpoint callbacks' best score, and the train loader's
  epoch and batches served (`prompts.ResumableLoader`).
- `LastCheckpoint` (`configs/callbacks/default.yaml`): Lightning's ModelCheckpoint for last.ckpt
  every N steps and at a run's last step, written after the validation when one runs at that
  step. Lightning's writes it before that validation, and a run resumed from it skips the
  validation (its loop counts it as done): that step's score never reached the best-checkpoint
  callback, and "best" could be another step than in the uninterrupted run. And a checkpoint
  saved once `trainer.fit` has returned (`max_steps` reached mid-epoch) counts that epoch as
  done: a run continued from it to more steps skips the epoch's other batches.
- `AtomicCheckpointIO`: Lightning's checkpoint IO writing each checkpoint whole or not at all
  (`atomic.write_file`: temp file beside it, fsync, rename). Lightning's own writes a temporary
  file in the system's temporary directory and moves it into place, a copy where that is another
  filesystem, which a full disk cut short: a 4 KiB `step_N.ckpt`, a `last.ckpt` replaced by part
  of one. A full disk stops the run with `atomic.DiskFull` naming the directory; the previous
  checkpoints are intact.
- `check_checkpoint`: a run's `ckpt_path` is a readable Lightning checkpoint whose tensors fit the
  pair (`model_shapes`: a local model's shapes from its safetensors headers), memory-mapped, before
  any weights load; a damaged one is named with the run's other whole checkpoints.

It does not choose what a checkpoint holds beyond that (the modules' state dicts).
"""

from __future__ import annotations

import hashlib
import io
import random
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from safetensors import safe_open

from diversed.errors import ConfigError
from diversed.files.atomic import write_file
from diversed.training.settings import LIGHTNING_CKPT_NAMES


def derived_seed(*parts: Any) -> int:
    """A 63-bit seed from `parts` (stable across processes and runs, unlike `hash`)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


def seed_all(seed: int) -> None:
    """Seed torch (CPU and every CUDA device), python's `random` and numpy's global generator."""
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional to torch
        return
    np.random.seed(seed % 2**32)


class StepSeeds(Callback):
    """Seeds each training batch by (seed, step, batch index, rank) and each validation by (seed, rank)."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        seed_all(derived_seed(self.seed, "train", trainer.global_step, batch_idx, trainer.global_rank))

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        seed_all(derived_seed(self.seed, "validation", trainer.global_rank))


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local checkpoints are written whole or not at all (`atomic.write_file`)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):  # Lightning's own errors and remote stores
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()  # (Lightning serialises to memory first too)
        torch.save(checkpoint, buffer)
        write_file(path, buffer.getbuffer())


class LastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint (`save_last`, `every_n_train_steps`) that also writes the last step of a run
    by steps (`trainer.max_steps`), and whose step checkpoint waits for the end of the validation
    that runs at the same step, if one does (the best-checkpoint callbacks, run before it, have
    seen that validation's score then). `saved_step`: the step last.ckpt holds (-1: none yet)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.every = int(kwargs.get("every_n_train_steps") or 0)
        self.after_validation, self.saved_step = False, -1

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        every, final = bool(self.every) and step % self.every == 0, step == trainer.max_steps
        if (every or final) and validates_now(trainer):
            self.after_validation = True
        elif final and not every:  # the run's last step: as a step checkpoint, mid-epoch where it is
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        else:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.after_validation and not trainer.sanity_checking:
            self.after_validation = False
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self.saved_step = trainer.global_step


def validates_now(trainer: Any) -> bool:
    """Whether Lightning validates after the training batch that just ended (its own rule, read from
    its training loop; False where this Lightning does not have it)."""
    loop = trainer.fit_loop.epoch_loop
    check, fetcher = (
        getattr(loop, "_should_check_val_fx", None),
        getattr(trainer.fit_loop, "_data_fetcher", None),
    )
    if (
        check is None
        or fetcher is None
        or not trainer.enable_validation
        or getattr(loop, "_skip_next_val", False)
    ):
        return False
    return bool(check(fetcher))


# ----------------------------------------------------------------------------- resuming


def check_checkpoint(
    path: str | None, expected: dict[str, tuple[int, ...]], what: str, *, weights_only: bool
) -> None:
    """ConfigError, naming the file and the fix, unless `path` (a run's `ckpt_path`) is a readable
    Lightning checkpoint whose tensors fit `expected` (name -> shape, for this pair): memory-mapped,
    so no tensor is read. `what` names the module's part it holds ("head", "draft"). LoRA's
    wrapped names (base_model.model., .base_layer) are compared as the plain ones."""
    if not path or str(path) in LIGHTNING_CKPT_NAMES:
        return
    fix = (
        "give a checkpoint of a run of this pair (<run dir>/checkpoints/last.ckpt), "
        "or ckpt_path=null to start afresh"
    )
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive, whose directory is at its end
        size = Path(path).stat().st_size
        raise ConfigError(
            f"ckpt_path={path} is not a complete checkpoint ({size} bytes, not a whole zip archive as "
            f"torch.save writes: cut short, damaged or another kind of file): {_instead(path, fix)}"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
    except Exception as e:  # cut short, empty, not a torch file
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint (incomplete or damaged: {type(e).__name__}: "
            f"{str(e).split('. ')[0]}): {_instead(path, fix)}"
        ) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise ConfigError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict): {fix}")
    shapes = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): tuple(v.shape)
        for k, v in ckpt["state_dict"].items()
        if hasattr(v, "shape")
    }
    common = [k for k in shapes if k in expected]
    if expected and not common:
        held = ", ".join(list(shapes)[:3]) or "nothing"
        raise ConfigError(
            f"ckpt_path={path} holds no tensor of this entry point's {what} (it holds {held}...): {fix}"
        )
    wrong = [f"{k} {shapes[k]} (this pair: {expected[k]})" for k in common if shapes[k] != expected[k]]
    if wrong:
        raise ConfigError(
            f"ckpt_path={path} was saved for another {what} or pair: "
            + "; ".join(wrong[:3])
            + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
            + f": {fix}"
        )


def _instead(path: str | Path, fix: str) -> str:
    """The fix for a damaged checkpoint: the run's other whole checkpoints (beside it, newest first), or
    `fix`."""
    path = Path(path)
    others = [p for p in path.parent.glob("*.ckpt") if p.name != path.name and zipfile.is_zipfile(p)]
    if not others:
        return fix
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    named = ", ".join(f"ckpt_path={p}" for p in others[:3])
    return f"resume from another checkpoint of the run ({named}), or ckpt_path=null to start afresh"


def model_shapes(card: Any, role: str) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of a local model of the pair (`role`: target or draft) from its safetensors
    headers (no tensor read); {} for a model that is not a local directory."""
    path = ((card.identity.get(role) or {}).get("path") if card is not None else None) or ""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(Path(path).glob("*.safetensors")) if path else []:
        with safe_open(str(file), "pt") as f:
            shapes |= {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    return shapes
