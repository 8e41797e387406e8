"""What the two training modules share: teacher-forced scoring, and the Lightning module of a pair.

The head (`train.py`) and the draft (`distill.py`) are both trained beside a (target, draft) pair
whose frozen models are held outside the module's parameters and checkpoints.

- `teacher_forced(sequences, prompt_mask, new_tokens)` (pure): left-padded prompts and their
  completions laid out for one forward of a model over both (the attention mask, position ids
  that skip the padding, and which completion slots hold tokens); `positions(mask)`, the position
  ids alone; `shared_logits(p_logits, q_logits)`, both models' logits over their shared vocabulary.
- `PairModule`: the LightningModule plumbing both build on: the pair (`pair=`; its frozen models
  placed on the module's device in eval mode when fitting or validating), the optimizer over the
  module's `trainable_parameters()` with its learning-rate schedule (`schedules.optimizers`), the
  data module's train and validation tasks, prompts padded on the device, speculative decoding of
  a batch with the engine, and validation: each step adds its decoding statistics (and task
  scores), summed over processes at the epoch's end and logged under the shared names
  (`val/acceptance_rate`, `val/tokens_per_target_call`, `OBJECTIVE` which the checkpoint callback
  keeps the best of) with the module's own (`validation_metrics`). A subclass names its export
  (`exported`, `export`), which `trainer.fit` writes from the best checkpoint.

It does not say what trains or by what loss (the head: `train.py`, `reinforce.py`; the draft:
`distill.py`, `teacher.py`), nor build or run the trainer (`trainer.fit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from diversed.decoding.engine import SpeculativeOutput, speculative_generate
from diversed.decoding.inputs import left_pad
from diversed.decoding.stats import SpeculativeStats, Totals
from diversed.training.schedules import optimizers

OBJECTIVE = "val/objective"  # what `configs/callbacks/default.yaml` monitors: the best checkpoint's metric

# ----------------------------------------------------------------------------- teacher-forced scoring (pure)


def positions(mask: Tensor) -> Tensor:
    """Position ids of rows by their attention mask ([B, T]): 0, 1, ... over the tokens, padding (left
    or right) at 0 or repeating the last position."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


def teacher_forced(
    sequences: Tensor, prompt_mask: Tensor, new_tokens: Tensor
) -> tuple[dict[str, Tensor], Tensor]:
    """Rows of left-padded prompts ([B, P] mask) and their completions (`new_tokens` [B] of the
    sequences' last C = T − P slots hold tokens) laid out for one teacher-forced forward: (inputs
    {input_ids, attention_mask, position_ids} for the model, completion mask [B, C]). The logits at
    slots P − 1 .. P + C − 2 predict the completion's tokens."""
    P = prompt_mask.shape[1]
    completion = torch.arange(sequences.shape[1] - P, device=sequences.device) < new_tokens.to(
        sequences.device
    ).unsqueeze(1)
    attention = torch.cat([prompt_mask, completion.long()], 1)
    return {
        "input_ids": sequences,
        "attention_mask": attention,
        "position_ids": positions(attention),
    }, completion


def shared_logits(p_logits: Tensor, q_logits: Tensor) -> tuple[Tensor, Tensor]:
    """The target's and the draft's logits ([..., V]) over the vocabulary they share (the smaller:
    the rows past it are an embedding's padding)."""
    vocab = min(p_logits.shape[-1], q_logits.shape[-1])
    return p_logits[..., :vocab], q_logits[..., :vocab]


# ----------------------------------------------------------------------------- the module


class PairModule(L.LightningModule):
    """A module trained beside a (target, draft) pair held outside its parameters and checkpoints.

    A subclass saves its hyperparameters (`save_hyperparameters`, with `lr_schedule`,
    `warmup_steps`, `num_draft_tokens` and `max_new_tokens` among them) and defines
    `trainable_parameters`, `validation_metrics`, `exported` and `export`; `frozen` if it trains one
    of the pair's models."""

    exported = ""  # the export's directory in the run directory (`trainer.fit` writes it)

    def __init__(self, optimizer: Callable[..., torch.optim.Optimizer], pair: Any = None) -> None:
        super().__init__()
        self.optimizer_factory = optimizer
        self._pair = pair  # not a submodule: moved here, never in a checkpoint
        self.val_totals, self.val_scores = (
            Totals(),
            [0.0, 0],
        )  # this process's validation sums (score sum, count)

    # --------------------------------------------------------------------- the pair

    @property
    def pair(self) -> Any:
        if self._pair is None:
            raise RuntimeError(f"{type(self).__name__} needs the (target, draft) pair: pass pair=")
        return self._pair

    def frozen(self) -> tuple[nn.Module, ...]:
        """The pair's models that do not train (both, unless a subclass trains one)."""
        return self.pair.target, self.pair.draft

    def place_pair(self) -> None:
        """The frozen models on this module's device, in eval mode, without gradients."""
        for model in self.frozen():
            if next(model.parameters()).device != self.device:
                model.to(self.device)
            model.eval().requires_grad_(False)

    def on_fit_start(self) -> None:
        self.place_pair()

    def on_validation_start(self) -> None:
        self.place_pair()

    # --------------------------------------------------------------------- optimizer and data

    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        """What the optimizer updates."""
        raise NotImplementedError

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        return optimizers(
            self, self.optimizer_factory(params=self.trainable_parameters()), hp.lr_schedule, hp.warmup_steps
        )

    @property
    def train_task(self) -> Any:
        return self.trainer.datamodule.train_task

    @property
    def val_task(self) -> Any:
        return self.trainer.datamodule.val_task

    def max_new_tokens(self, task: Any) -> int:
        """`max_new_tokens`, or the task's own where it is not set."""
        return self.hparams.max_new_tokens or task.max_new_tokens

    def prompts(self, task: Any, examples: list[dict]) -> tuple[Tensor, Tensor]:
        """`examples`' prompts, tokenized by `task` and left-padded on this device: (ids, mask) [B, P]."""
        tok = self.pair.tokenizer
        return left_pad(task.encode(tok, examples), tok.pad_token_id, self.device)

    def speculative(
        self,
        task: Any,
        examples: list[dict],
        draft: nn.Module,
        verifier: Any,
        *,
        do_sample: bool,
        temperature: float,
        **engine: Any,
    ) -> tuple[SpeculativeOutput, Tensor, Tensor]:
        """`examples` decoded by the engine (`num_draft_tokens`, the task's stopper), `draft`
        proposing to the target; `engine`: its other settings. Returns (output, prompt ids, prompt mask)."""
        tok = self.pair.tokenizer
        ids, mask = self.prompts(task, examples)
        out = speculative_generate(
            self.pair.target,
            draft,
            ids,
            mask,
            verifier=verifier,
            num_draft_tokens=self.hparams.num_draft_tokens,
            max_new_tokens=self.max_new_tokens(task),
            do_sample=do_sample,
            temperature=temperature,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            stop=task.stopper(tok),
            **engine,
        )
        return out, ids, mask

    # --------------------------------------------------------------------- validation

    def add_validation(self, stats: SpeculativeStats, scores: Sequence[float] = ()) -> None:
        """A validation step's decoding statistics and task scores, into this process's sums."""
        self.val_totals.add(stats)
        self.val_scores = [self.val_scores[0] + sum(scores), self.val_scores[1] + len(scores)]

    def decoding_metrics(self, totals: Totals) -> dict[str, float]:
        """The validation decoding's numbers, under the names both modules log."""
        return {
            "val/acceptance_rate": totals.acceptance_rate,
            "val/tokens_per_target_call": totals.tokens_per_target_call,
        }

    def validation_metrics(self, totals: Totals, score: float | None) -> dict[str, float]:
        """What to log of a validation epoch ({} for nothing): `totals` over every process, `score`
        the mean task score (None without scores). `OBJECTIVE` among them."""
        raise NotImplementedError

    def on_validation_epoch_end(self) -> None:
        # summed over processes (a no-op on one): the statistics, the score sum and the count
        local = torch.cat(
            [
                self.val_totals.to_vector(self.device),
                torch.tensor(self.val_scores, dtype=torch.float64, device=self.device),
            ]
        )
        summed = self.trainer.strategy.reduce(local, reduce_op="sum") if self._trainer is not None else local
        self.val_totals, self.val_scores = Totals(), [0.0, 0]
        totals, (score_sum, n) = Totals.from_vector(summed[:-2]), summed[-2:].tolist()
        metrics = self.validation_metrics(totals, score_sum / n if n else None)
        if metrics:  # already over every process (identical on each): sync_dist's mean keeps them
            self.log_dict({k: float(v) for k, v in metrics.items()}, prog_bar=True, sync_dist=True)

    # --------------------------------------------------------------------- export

    def export(self, directory: Path, checkpoint: str) -> None:
        """Write what was trained (the best checkpoint's state, loaded; `checkpoint` its path, "" if
        none) to `directory`."""
        raise NotImplementedError
