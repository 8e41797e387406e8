"""The DIVERSED head's Lightning module: REINFORCE on the task reward plus an acceptance regulariser.

`python -m diversed.train +experiment=toy` (`diversed/train.py`) composes `configs/train.yaml` and fits it.

Per batch of prompts (each repeated K times):
  1. rollout: sample completions from v with the current head, through the engine with
     `DynamicEnsemble` and `bonus_token="ensemble"`, so every token is exactly v-distributed
     (on-policy);
  2. one no-grad forward of each frozen model over prompt + completion, teacher-forced
     (`pair_module.teacher_forced`), gives p_t, q_t and both last hidden states; only the head
     runs with grad: w_t = head(h_draft_t, h_target_t);
  3. loss = −mean[(R − b)·Σ_t log v_t(x_t)] + λ·mean[Σ_t w_t·TV(p_t, q_t)] (`reinforce.py`: the
     objective, its baselines b and its fixed or adaptive λ), where
     log v_t(x_t) = log(w_t·p_t(x_t) + (1 − w_t)·q_t(x_t)), TV(q_t, v_t) = w_t·TV(p_t, q_t)
     (1 − TV(q_t, v_t) is the acceptance probability of a draft token at t).

`DiversedModule` is a `pair_module.PairModule`: the frozen pair is held outside its parameters and
state dict (checkpoints hold the head, the baseline and the optimizer only), and validation decodes
held-out prompts with the current head and logs the task score, acceptance and
`val/objective` = score + λ·acceptance. The settings are checked once, by `schema.check_train`,
before anything loads; the module does not check them again. Distribution, precision and devices
are Lightning's; nothing here launches processes or moves gradients by hand."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from diversed.decoding.stats import Totals
from diversed.decoding.stopping import decode_completions
from diversed.decoding.verify import DynamicEnsemble, probs_from_logits, run_head, total_variation
from diversed.models.heads import pair_record
from diversed.models.pair import hidden_size
from diversed.training.pair_module import OBJECTIVE, PairModule, shared_logits, teacher_forced
from diversed.training.reinforce import advantage, regularised_loss

log = logging.getLogger(__name__)


class DiversedModule(PairModule):
    """The trainable head beside a frozen (target, draft) pair; its checkpoints hold the head, the
    running baseline and the optimizer. The settings are checked by `schema.check_train`."""

    exported = "head"

    def __init__(
        self,
        head: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        pair: Any = None,
        reg_scale: float = 0.1,
        reg_mode: str = "fixed",
        baseline: str = "running",
        baseline_momentum: float = 0.9,
        baseline_constant: float = 1.0,
        lr_schedule: str = "constant",
        warmup_steps: int = 0,
        num_samples: int = 1,
        do_sample: bool = True,
        temperature: float = 1.0,
        num_draft_tokens: int = 5,
        max_new_tokens: int | None = None,
        normalize_advantage: bool = False,
        val_do_sample: bool = False,
        val_temperature: float = 1.0,
    ) -> None:
        super().__init__(optimizer, pair)
        self.save_hyperparameters(ignore=["head", "pair", "optimizer"])
        self.head = head
        self.register_buffer("baseline_value", torch.zeros(()))
        self.register_buffer("baseline_steps", torch.zeros((), dtype=torch.long))

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return self.head.parameters()

    # --------------------------------------------------------------------- rollout and scoring

    def rollout(self, task: Any, examples: list[dict], *, do_sample: bool, temperature: float):
        """Decode `examples` with the engine and the current head; returns (output, prompt mask,
        completions)."""
        out, ids, mask = self.speculative(
            task,
            examples,
            self.pair.draft,
            DynamicEnsemble(self.head),
            do_sample=do_sample,
            temperature=temperature,
            bonus_token="ensemble",
        )
        return (
            out,
            mask,
            decode_completions(self.pair.tokenizer, out.sequences, ids.shape[1], out.stats.new_tokens),
        )

    @torch.no_grad()
    def score_tokens(self, sequences: Tensor, prompt_mask: Tensor, new_tokens: Tensor, temperature: float):
        """One no-grad forward per model over prompt + completion: p_t(x_t), q_t(x_t), TV, hidden states."""
        inputs, comp_mask = teacher_forced(sequences, prompt_mask, new_tokens)
        P = prompt_mask.shape[1]
        x = sequences[:, P:]
        outs = []
        for model in (self.pair.target, self.pair.draft):
            o = model(**inputs, output_hidden_states=True)
            # logits at P−1 .. P+T−2 predict the completion tokens
            outs.append((o.logits[:, P - 1 : -1], o.hidden_states[-1][:, P - 1 : -1]))
        (lp, h_t), (lq, h_d) = outs
        lp, lq = shared_logits(lp, lq)
        p, q = probs_from_logits(lp, temperature), probs_from_logits(lq, temperature)
        p_x, q_x = p.gather(-1, x.unsqueeze(-1)).squeeze(-1), q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        extra = {"p": p, "q": q} if getattr(self.head, "uses_distributions", False) else None
        return p_x, q_x, total_variation(p, q), h_d, h_t, comp_mask, extra

    # --------------------------------------------------------------------- training

    def training_step(self, batch: list[dict], batch_idx: int) -> Tensor:
        hp = self.hparams
        task = self.train_task
        examples = [e for e in batch for _ in range(hp.num_samples)]
        temperature = hp.temperature if hp.do_sample else 1.0
        out, prompt_mask, completions = self.rollout(
            task, examples, do_sample=hp.do_sample, temperature=temperature
        )
        reward = torch.tensor(
            task.reward_batch(examples, completions), dtype=torch.float32, device=self.device
        )
        p_x, q_x, tv, h_d, h_t, mask, extra = self.score_tokens(
            out.sequences, prompt_mask, out.stats.new_tokens, temperature
        )
        w = run_head(self.head, h_d, h_t, **(extra or {}))

        a = advantage(
            reward,
            hp.baseline,
            num_samples=hp.num_samples,
            constant=hp.baseline_constant,
            running=self.baseline_value if self.baseline_steps > 0 else None,
            normalize=hp.normalize_advantage,
        )
        if hp.baseline == "running":
            m = hp.baseline_momentum if self.baseline_steps > 0 else 0.0
            self.baseline_value.copy_(m * self.baseline_value + (1 - m) * reward.mean())
            self.baseline_steps += 1
        loss, pg, reg, scale = regularised_loss(w, p_x, q_x, tv, mask, a, hp.reg_scale, hp.reg_mode)

        m = mask.float()
        n_tok = m.sum().clamp_min(1)
        bs = len(examples)
        self.log_dict(
            {
                "train/loss": loss,
                "train/pg": pg,
                "train/reg": reg,
                "train/reward": reward.mean(),
                "train/acceptance": 1 - ((w * tv) * m).sum().detach() / n_tok,  # E_t[1 − w_t·TV_t]
                "train/rollout_acceptance_rate": out.stats.acceptance_rate,
                "train/mean_w": (w * m).sum().detach() / n_tok,
                "train/reg_scale": float(scale),
            },
            prog_bar=False,
            batch_size=bs,
        )
        self.log("train/reward_avg", reward.mean(), prog_bar=True, batch_size=bs)
        return loss

    # --------------------------------------------------------------------- validation and export

    def validation_step(self, batch: list[dict], batch_idx: int) -> None:
        hp = self.hparams
        task = self.val_task
        out, _, completions = self.rollout(
            task, batch, do_sample=hp.val_do_sample, temperature=hp.val_temperature
        )
        self.add_validation(out.stats, task.score_batch(batch, completions))

    def validation_metrics(self, totals: Totals, score: float | None) -> dict[str, float]:
        if score is None:
            return {}
        return {
            "val/score": score,
            **self.decoding_metrics(totals),
            "val/mean_w": totals.mean_w,
            # what training maximises: task score, plus λ times the acceptance rate
            OBJECTIVE: score + self.hparams.reg_scale * totals.acceptance_rate,
        }

    def export(self, directory: Path, checkpoint: str) -> None:
        """The head's weights and config (its pair, task, λ and the checkpoint it came from)."""
        self.head.save_pretrained(directory, reg_scale=self.hparams.reg_scale, checkpoint=checkpoint or None)


def build_head(head_factory: Callable[..., nn.Module], pair: Any, task_name: str) -> nn.Module:
    """Instantiate the head for the pair's hidden sizes, recording the pair (its name and its models'
    identity, which evaluation checks heads against) and task."""
    return head_factory(
        draft_hidden_size=hidden_size(pair.draft),
        target_hidden_size=hidden_size(pair.target),
        pair=pair.name,
        target_name=pair.target_name,
        draft_name=pair.draft_name,
        task=task_name,
        pair_identity=pair_record(getattr(pair, "identity", None) or {}) or None,
    )


def head_shapes(head_factory: Callable[..., nn.Module], card: Any) -> dict[str, tuple[int, ...]]:
    """The module's head tensor shapes for a pair's card (its hidden sizes), without its weights: built
    on the meta device, the random generator's state kept (the run's own head is drawn after this)."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        head = head_factory(draft_hidden_size=card.hidden["draft"], target_hidden_size=card.hidden["target"])
    return {f"head.{k}": tuple(v.shape) for k, v in head.state_dict().items()}
