"""Train a DIVERSED weight head: REINFORCE on the task reward plus an acceptance regulariser.

`python -m diversed.train +experiment=toy` composes `configs/train.yaml` and calls `train(cfg)`.

Per batch of prompts (each repeated K times):
  1. rollout: sample completions from v with the current head, through the engine with
     `DynamicEnsemble` and `bonus_token="ensemble"`, so every token is exactly v-distributed
     (on-policy);
  2. one no-grad forward of each frozen model over prompt + completion gives p_t, q_t and both
     last hidden states; only the head runs with grad: w_t = head(h_draft_t, h_target_t);
  3. loss = −mean[(R − b)·Σ_t log v_t(x_t)] + λ·mean[Σ_t w_t·TV(p_t, q_t)],
     log v_t(x_t) = log(w_t·p_t(x_t) + (1 − w_t)·q_t(x_t)), TV(q_t, v_t) = w_t·TV(p_t, q_t)
     (1 − TV(q_t, v_t) is the acceptance probability of a draft token at t).

The frozen pair is held outside the module's parameters and state dict: checkpoints hold the
head, the baseline and the optimizer only. Distribution, precision and devices are Lightning's;
nothing here launches processes or moves gradients by hand.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from diversed import CONFIG_DIR
from diversed.atomic import write_directory
from diversed.engine import speculative_generate
from diversed.errors import hydra_task
from diversed.heads import pair_record
from diversed.inputs import left_pad
from diversed.pair import hidden_size
from diversed.preflight import check_checkpoint
from diversed.runtime import LR_SCHEDULES, finish, fit, optimizers, prepare_training
from diversed.schema import BASELINES, check_train
from diversed.stats import Totals
from diversed.stopping import decode_completions
from diversed.verify import DynamicEnsemble, probs_from_logits, run_head, total_variation

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- the loss (pure)


def policy_loss(
    w: Tensor, p_x: Tensor, q_x: Tensor, tv: Tensor, mask: Tensor, advantage: Tensor, reg_scale: float | Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """REINFORCE on v plus the acceptance regulariser, over completion tokens ([B, T] inputs).

    log v_t(x_t) = log(w_t·p_t(x_t) + (1 − w_t)·q_t(x_t))
    pg  = −mean_b[(R − b)·Σ_t log v_t(x_t)]
    reg =  mean_b[Σ_t TV(q_t, v_t)] = mean_b[Σ_t w_t·TV(p_t, q_t)]
    Returns (pg + λ·reg, pg, reg).
    """
    m = mask.to(w.dtype)
    log_v = torch.log((w * p_x + (1.0 - w) * q_x).clamp_min(1e-30))
    pg = -(advantage * (log_v * m).sum(1)).mean()
    reg = ((w * tv) * m).sum(1).mean()
    return pg + reg_scale * reg, pg, reg


# ----------------------------------------------------------------------------- the module


class DiversedModule(L.LightningModule):
    """The trainable head beside a frozen (target, draft) pair."""

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
        super().__init__()
        if reg_mode not in ("fixed", "adaptive"):
            raise ValueError(f"model.reg_mode must be 'fixed' or 'adaptive', got {reg_mode!r}")
        if baseline not in BASELINES:
            raise ValueError(f"model.baseline must be one of {BASELINES}, got {baseline!r}")
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"model.lr_schedule must be one of {LR_SCHEDULES}, got {lr_schedule!r}")
        if baseline == "group" and num_samples < 2:
            raise ValueError("model.baseline=group needs model.num_samples >= 2 completions per prompt")
        if reg_scale < 0:
            raise ValueError(f"model.reg_scale must be >= 0, got {reg_scale}")
        self.save_hyperparameters(ignore=["head", "pair", "optimizer"])
        self.head = head
        self.optimizer_factory = optimizer
        self._pair = pair  # not a submodule: never trained, moved by us, absent from checkpoints
        self.register_buffer("baseline_value", torch.zeros(()))
        self.register_buffer("baseline_steps", torch.zeros((), dtype=torch.long))
        self.val_totals, self.val_scores = Totals(), [0.0, 0]  # this process's validation sums

    # --------------------------------------------------------------------- plumbing

    @property
    def pair(self) -> Any:
        if self._pair is None:
            raise RuntimeError("DiversedModule needs the (target, draft) pair: pass pair=")
        return self._pair

    def on_fit_start(self) -> None:
        self._place_pair()

    def on_validation_start(self) -> None:
        self._place_pair()

    def _place_pair(self) -> None:
        for model in (self.pair.target, self.pair.draft):
            if next(model.parameters()).device != self.device:
                model.to(self.device)
            model.eval().requires_grad_(False)

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        return optimizers(self, self.optimizer_factory(params=self.head.parameters()), hp.lr_schedule, hp.warmup_steps)

    def _task(self, stage: str) -> Any:
        dm = self.trainer.datamodule
        return dm.train_task if stage == "train" else dm.val_task

    # --------------------------------------------------------------------- rollout and scoring

    def rollout(self, task: Any, examples: list[dict], *, do_sample: bool, temperature: float):
        """Decode `examples` with the engine and the current head; returns (output, prompt mask, completions)."""
        tok = self.pair.tokenizer
        ids, mask = left_pad(task.encode(tok, examples), tok.pad_token_id, self.device)
        max_new = self.hparams.max_new_tokens or task.max_new_tokens
        out = speculative_generate(
            self.pair.target, self.pair.draft, ids, mask, verifier=DynamicEnsemble(self.head),
            num_draft_tokens=self.hparams.num_draft_tokens, max_new_tokens=max_new, do_sample=do_sample,
            temperature=temperature, bonus_token="ensemble", eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id, stop=task.stopper(tok),
        )  # fmt: skip
        return out, mask, decode_completions(tok, out.sequences, ids.shape[1], out.stats.new_tokens)

    @torch.no_grad()
    def score_tokens(self, sequences: Tensor, prompt_mask: Tensor, new_tokens: Tensor, temperature: float):
        """One no-grad forward per model over prompt + completion: p_t(x_t), q_t(x_t), TV, hidden states."""
        B, P = prompt_mask.shape
        Tn = sequences.shape[1] - P
        steps = torch.arange(Tn, device=sequences.device)
        comp_mask = steps < new_tokens.to(sequences.device).unsqueeze(1)
        attn = torch.cat([prompt_mask, comp_mask.long()], 1)
        position_ids = (attn.cumsum(-1) - 1).clamp_min(0)
        x = sequences[:, P:]
        outs = []
        for model in (self.pair.target, self.pair.draft):
            o = model(input_ids=sequences, attention_mask=attn, position_ids=position_ids, output_hidden_states=True)
            # logits at P−1 .. P+T−2 predict the completion tokens
            outs.append((o.logits[:, P - 1 : -1], o.hidden_states[-1][:, P - 1 : -1]))
        (lp, h_t), (lq, h_d) = outs
        vocab = min(lp.shape[-1], lq.shape[-1])
        p, q = probs_from_logits(lp[..., :vocab], temperature), probs_from_logits(lq[..., :vocab], temperature)
        p_x, q_x = p.gather(-1, x.unsqueeze(-1)).squeeze(-1), q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        extra = {"p": p, "q": q} if getattr(self.head, "uses_distributions", False) else None
        return p_x, q_x, total_variation(p, q), h_d, h_t, comp_mask, extra

    # --------------------------------------------------------------------- training

    def training_step(self, batch: list[dict], batch_idx: int) -> Tensor:
        hp = self.hparams
        task = self._task("train")
        examples = [e for e in batch for _ in range(hp.num_samples)]
        temperature = hp.temperature if hp.do_sample else 1.0
        out, prompt_mask, completions = self.rollout(task, examples, do_sample=hp.do_sample, temperature=temperature)
        reward = torch.tensor(task.reward_batch(examples, completions), dtype=torch.float32, device=self.device)
        p_x, q_x, tv, h_d, h_t, mask, extra = self.score_tokens(out.sequences, prompt_mask, out.stats.new_tokens, temperature)
        w = run_head(self.head, h_d, h_t, **(extra or {}))

        if hp.baseline == "group":  # mean reward of the K completions of the same prompt
            b = reward.view(-1, hp.num_samples).mean(1, keepdim=True).expand(-1, hp.num_samples).reshape(-1)
        elif hp.baseline == "constant":  # a fixed b (the released trainer: b = 1 for 0/1 rewards)
            b = torch.full_like(reward, hp.baseline_constant)
        else:  # running mean of past batches (initialised with the first batch)
            b = self.baseline_value if self.baseline_steps > 0 else reward.mean()
        advantage = reward - b
        if hp.normalize_advantage:
            advantage = advantage / (reward.std(unbiased=False) + 1e-6)
        if hp.baseline == "running":
            m = hp.baseline_momentum if self.baseline_steps > 0 else 0.0
            self.baseline_value.copy_(m * self.baseline_value + (1 - m) * reward.mean())
            self.baseline_steps += 1

        scale: float | Tensor = hp.reg_scale
        if hp.reg_mode == "adaptive":
            # λ_t = λ·|pg|/reg, detached: the regulariser keeps a fixed share of the policy-gradient
            # term's magnitude as the reward signal grows or fades.
            _, pg0, reg0 = policy_loss(w, p_x, q_x, tv, mask, advantage, 0.0)
            scale = hp.reg_scale * (pg0.detach().abs() / reg0.detach().clamp_min(1e-8))
        loss, pg, reg = policy_loss(w, p_x, q_x, tv, mask, advantage, scale)

        m = mask.float()
        n_tok = m.sum().clamp_min(1)
        bs = len(examples)
        self.log_dict(
            {
                "train/loss": loss, "train/pg": pg, "train/reg": reg,
                "train/reward": reward.mean(),
                "train/acceptance": 1 - ((w * tv) * m).sum().detach() / n_tok,  # E_t[1 − w_t·TV_t]
                "train/rollout_acceptance_rate": out.stats.acceptance_rate,
                "train/mean_w": (w * m).sum().detach() / n_tok,
                "train/reg_scale": float(scale),
            },
            prog_bar=False, batch_size=bs,
        )  # fmt: skip
        self.log("train/reward_avg", reward.mean(), prog_bar=True, batch_size=bs)
        return loss

    # --------------------------------------------------------------------- validation

    def validation_step(self, batch: list[dict], batch_idx: int) -> None:
        hp = self.hparams
        task = self._task("val")
        out, _, completions = self.rollout(task, batch, do_sample=hp.val_do_sample, temperature=hp.val_temperature)
        scores = task.score_batch(batch, completions)
        self.val_totals.add(out.stats)
        self.val_scores = [self.val_scores[0] + sum(scores), self.val_scores[1] + len(scores)]

    def on_validation_epoch_end(self) -> None:
        # summed over processes (a no-op on one): the statistics, the score sum and the count
        local = torch.cat([self.val_totals.to_vector(self.device), torch.tensor(self.val_scores, dtype=torch.float64, device=self.device)])
        summed = self.trainer.strategy.reduce(local, reduce_op="sum") if self._trainer is not None else local
        self.val_totals, self.val_scores = Totals(), [0.0, 0]
        totals, (score_sum, n) = Totals.from_vector(summed[:-2]), summed[-2:].tolist()
        if n == 0:
            return
        score = score_sum / n
        metrics = {
            "val/score": score,
            "val/acceptance_rate": totals.acceptance_rate,
            "val/tokens_per_target_call": totals.tokens_per_target_call,
            "val/mean_w": totals.mean_w,
            # what training maximises: task score, plus λ times the acceptance rate
            "val/objective": score + self.hparams.reg_scale * totals.acceptance_rate,
        }
        # the values are already over every process (identical on each): sync_dist's mean keeps them
        self.log_dict({k: float(v) for k, v in metrics.items()}, prog_bar=True, sync_dist=True)


# ----------------------------------------------------------------------------- entry point


def build_head(head_factory: Callable[..., nn.Module], pair: Any, task_name: str) -> nn.Module:
    """Instantiate the head for the pair's hidden sizes, recording the pair (its name and its models'
    identity, which evaluation checks heads against) and task."""
    return head_factory(
        draft_hidden_size=hidden_size(pair.draft),
        target_hidden_size=hidden_size(pair.target),
        pair=pair.name, target_name=pair.target_name, draft_name=pair.draft_name, task=task_name,
        pair_identity=pair_record(getattr(pair, "identity", None) or {}) or None,
    )  # fmt: skip


def head_shapes(head_factory: Callable[..., nn.Module], card: Any) -> dict[str, tuple[int, ...]]:
    """The module's head tensor shapes for a pair's card (its hidden sizes), without its weights: built
    on the meta device, the random generator's state kept (the run's own head is drawn after this)."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        head = head_factory(draft_hidden_size=card.hidden["draft"], target_hidden_size=card.hidden["target"])
    return {f"head.{k}": tuple(v.shape) for k, v in head.state_dict().items()}


def train(cfg: DictConfig) -> dict[str, Any]:
    """Check the settings, load the data and describe the pair (no weights yet), then instantiate
    pair, head, module, loggers, callbacks and trainer; fit; save last.ckpt; export the head."""
    check_train(cfg)  # every setting, before anything is read

    def fits(card: Any) -> None:  # ckpt_path: readable, and a head of this pair's shapes (before the weights)
        expected = {} if card is None else head_shapes(hydra.utils.instantiate(cfg.head), card)
        check_checkpoint(cfg.get("ckpt_path"), expected, "head", weights_only=True)

    datamodule, pair = prepare_training(cfg, cfg.model.get("max_new_tokens"), check_resume=fits)
    head = build_head(hydra.utils.instantiate(cfg.head), pair, cfg.task.name)
    model = hydra.utils.instantiate(cfg.model, head=head, pair=pair)
    run = fit(cfg, model, datamodule)
    if run.state is not None:  # the best head by the monitored metric
        model.head.load_state_dict({k.removeprefix("head."): v for k, v in run.state.items() if k.startswith("head.")})
    out_dir = Path(cfg.paths.output_dir) / "head"
    if run.is_global_zero:
        # whole or not at all: a kill or a full disk leaves the previous export (a resumed run's) or none
        write_directory(out_dir, lambda d: model.head.save_pretrained(d, reg_scale=cfg.model.reg_scale,
                                                                      checkpoint=run.best or None))  # fmt: skip
        log.info(f"Exported the head to {out_dir}")
    finish(run.loggers)
    return {"metrics": run.metrics, "head_dir": str(out_dir), "best_checkpoint": run.best}


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
@hydra_task
def main(cfg: DictConfig) -> float | None:
    result = train(cfg)
    print(result["head_dir"])
    value = result["metrics"].get(cfg.get("optimized_metric") or "", math.nan)
    return None if math.isnan(value) else value


if __name__ == "__main__":
    main()
