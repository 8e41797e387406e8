"""The head's objective (pure): REINFORCE on v with a baseline, plus the acceptance regulariser.

Over a batch of completions ([B, T] per-token inputs, `mask` the completion's tokens):
  log v_t(x_t) = log(w_t·p_t(x_t) + (1 − w_t)·q_t(x_t))
  pg  = −mean_b[(R − b)·Σ_t log v_t(x_t)]
  reg =  mean_b[Σ_t TV(q_t, v_t)] = mean_b[Σ_t w_t·TV(p_t, q_t)]
         (1 − TV(q_t, v_t): a draft token's acceptance)
  loss = pg + λ·reg

- `advantage(reward, baseline, ...)`: R − b with b one of `BASELINES`: `running` (a running mean of
  past batches' rewards, which the module keeps), `group` (the mean of the K completions of the
  same prompt), `constant`; optionally divided by the batch's reward spread.
- `policy_loss(...)`: (pg + λ·reg, pg, reg); `regularised_loss(...)` with λ one of `REG_MODES`:
  `fixed`, or `adaptive` (λ·|pg|/reg, detached: the regulariser keeps a fixed share of the policy
  gradient's magnitude as the reward signal grows or fades).

- `log_v`, `equal_acceptance_weight`: the reference's log-likelihood under v, and the constant w with
  a head's mean rejection (`diversed.likelihood` sets a head against it on held-out references).
- `teacher_forced_loss(...)`: the cheap first stage's objective (`model.teacher_forced_steps`), on
  the reference completions y* instead of samples, with no reward:
    loss = −mean_t log(w_t·p_t(y*_t) + (1 − w_t)·q_t(y*_t)) + λ·mean_t w_t·TV(p_t, q_t)
  (means over the batch's reference tokens): w rises where the target predicts the reference
  better than the draft, falls where the draft does, and λ pulls it down where they differ.
  `OBJECTIVES`: what the run's own steps minimise (`model.objective`): `reinforce` (the paper's
  policy gradient on the task reward), or `teacher_forced` (this loss: the reference's
  log-likelihood under v, a dense signal where the task's reward is mostly 0 for a few noisy steps).

The names are the settings' (`training/settings.py` reads them from here). It does not roll out, score or
keep state (`train.py` does).
"""

from __future__ import annotations

import torch
from torch import Tensor

BASELINES = ("running", "group", "constant")
REG_MODES = ("fixed", "adaptive")
OBJECTIVES = ("reinforce", "teacher_forced")


def advantage(
    reward: Tensor,
    baseline: str,
    *,
    num_samples: int = 1,
    constant: float = 1.0,
    running: Tensor | None = None,
    normalize: bool = False,
) -> Tensor:
    """R − b per completion ([B] rewards, each prompt's `num_samples` completions side by side);
    `running`: the running baseline's value (None before its first batch: the batch's mean)."""
    if baseline == "group":  # mean reward of the K completions of the same prompt
        b = reward.view(-1, num_samples).mean(1, keepdim=True).expand(-1, num_samples).reshape(-1)
    elif baseline == "constant":  # a fixed b (the released trainer: b = 1 for 0/1 rewards)
        b = torch.full_like(reward, constant)
    else:  # running mean of past batches (initialised with the first batch)
        b = running if running is not None else reward.mean()
    a = reward - b
    if normalize:
        a = a / (reward.std(unbiased=False) + 1e-6)
    return a


def policy_loss(
    w: Tensor,
    p_x: Tensor,
    q_x: Tensor,
    tv: Tensor,
    mask: Tensor,
    advantage: Tensor,
    reg_scale: float | Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """REINFORCE on v plus the acceptance regulariser, over completion tokens ([B, T] inputs).
    Returns (pg + λ·reg, pg, reg)."""
    m = mask.to(w.dtype)
    pg = -(advantage * (log_v(w, p_x, q_x) * m).sum(1)).mean()
    reg = ((w * tv) * m).sum(1).mean()
    return pg + reg_scale * reg, pg, reg


def regularised_loss(
    w: Tensor,
    p_x: Tensor,
    q_x: Tensor,
    tv: Tensor,
    mask: Tensor,
    advantage: Tensor,
    reg_scale: float,
    reg_mode: str = "fixed",
) -> tuple[Tensor, Tensor, Tensor, float | Tensor]:
    """`policy_loss` with λ = `reg_scale` (`fixed`) or λ·|pg|/reg, detached (`adaptive`);
    (loss, pg, reg, λ used)."""
    scale: float | Tensor = reg_scale
    if reg_mode == "adaptive":
        _, pg0, reg0 = policy_loss(w, p_x, q_x, tv, mask, advantage, 0.0)
        scale = reg_scale * (pg0.detach().abs() / reg0.detach().clamp_min(1e-8))
    return (*policy_loss(w, p_x, q_x, tv, mask, advantage, scale), scale)


def log_v(w: Tensor | float, p_y: Tensor, q_y: Tensor) -> Tensor:
    """log v_t(y_t) = log(w_t·p_t(y_t) + (1 − w_t)·q_t(y_t)), floored at log 1e-30 (a token both laws
    rule out)."""
    return torch.log((w * p_y + (1.0 - w) * q_y).clamp_min(1e-30))


def equal_acceptance_weight(w: Tensor, tv: Tensor, mask: Tensor) -> float:
    """The constant w* that rejects as much as the head over the masked tokens:
    w* = Σ_t w_t·TV_t / Σ_t TV_t, so that mean_t w*·TV_t = mean_t w_t·TV_t (a draft token's
    acceptance, 1 − w·TV, the same on average). 1.0 where the laws never differ (TV = 0)."""
    m = mask.to(tv.dtype)
    total = (tv * m).sum()
    return float((w * tv * m).sum() / total) if total > 0 else 1.0


def teacher_forced_loss(
    w: Tensor,
    p_y: Tensor,
    q_y: Tensor,
    tv: Tensor,
    mask: Tensor,
    reg_scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """The teacher-forced stage's loss over reference tokens ([B, T] inputs, `mask` the tokens):
    (nll + λ·reg, nll, reg)."""
    m = mask.to(w.dtype)
    n = m.sum().clamp_min(1)
    # loss = −mean_t log(w_t·p_t(y*_t) + (1 − w_t)·q_t(y*_t)) + λ·mean_t w_t·TV(p_t, q_t)
    nll = -(log_v(w, p_y, q_y) * m).sum() / n
    reg = ((w * tv) * m).sum() / n
    return nll + reg_scale * reg, nll, reg
