"""Relaxed verification rules from the literature, each a small class on the `Verifier` interface.

Notation as in `verify.py`: p target, q draft (after temperature), a drafted token x ~ q.

- `LossySD(lenience)`: Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative
  Decoding", appendix A.5, lenience): accept x with probability min(1, p(x) / (l·q(x))), and at a
  rejection sample p'(x) = normalize(max(0, p(x) − l·q(x))). l = 1 is lossless; smaller l accepts
  more. The output is no longer p: a token is emitted with probability
  min(q(x), p(x)/l) + (1 − β)·p'(x), β = Σ_x min(q(x), p(x)/l) (`lossy_first_token`). Greedy is
  the temperature → 0 limit of the rule, which is lossless greedy (accept while x = argmax p).
- `Cascade(rule, alpha)`: token-level speculative cascades (Narasimhan et al., "Faster Cascades
  via Speculative Decoding", ICLR 2025): per position a deferral rule picks the distribution to
  follow, π = p (defer to the target) or π = q, and speculative decoding runs against π. That is
  the ensemble v = w·p + (1 − w)·q with w = 1[defer] ∈ {0, 1}, exactly, so `Cascade` is an
  `Ensemble` whose weights are the rule's: Chow defers if max q < 1 − α; Diff if
  max q < max p − α; OPT if max q < max p − α·TV(p, q). The statistics' mean w is the deferral rate.
- `TypicalAcceptance(epsilon, delta)`: Medusa's typical acceptance (Cai et al. 2024, §3.3.1;
  defaults ε = 0.09, δ = 0.3 as in its `medusa_generate`): accept x if
  p(x) > min(ε, δ·exp(−H(p))), a deterministic test. The token after the accepted prefix, at a
  rejection and after a full round alike, is sampled from p restricted to the tokens that pass
  the same test (Medusa's `get_typical_one_token`; its "fast" mode takes argmax p instead), renormalised:
  `typical_truncation`. Greedy: accept while x = argmax p, then argmax p (Medusa at temperature 0).
  Its autoregressive baseline draws every token from that law (`autoregressive_generate` with this
  verifier and no draft; the method `autoregressive_typical`), so a quality gap between typical
  acceptance and plain autoregressive decoding can be split into the truncation's share and the rest.

Each accepts batched inputs and runs through `speculative_generate` unchanged. It does not
decide anything the interface does not pass in (no model calls, no state between rounds).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from diversed.decoding.verify import Ensemble, Verifier, at_token, residual, total_variation, uniform

# ----------------------------------------------------------------------------- lossy SD


class LossySD(Verifier):
    """Leviathan et al.'s lenience l ∈ (0, 1]: accept with min(1, p(x)/(l·q(x)))."""

    kind = "lossy"

    def __init__(self, lenience: float) -> None:
        super().__init__()
        lenience = float(lenience)
        if not 0.0 < lenience <= 1.0:
            raise ValueError(f"LossySD lenience must be in (0, 1] (1 = lossless), got {lenience}")
        self.lenience = lenience

    def accept(self, p, q, x, w, generator) -> Tensor:
        # u < p(x)/(l·q(x))  <=>  u·l·q(x) < p(x), without the division
        return uniform(x, generator) * self.lenience * at_token(q, x) < at_token(p, x)

    def rejection(self, p, q, w) -> Tensor:
        return residual(p, self.lenience * q)  # normalize(max(0, p − l·q))

    def extra_repr(self) -> str:
        return f"lenience={self.lenience}"


def lossy_first_token(p: Tensor, q: Tensor, lenience: float) -> Tensor:
    """The distribution of a token emitted by `LossySD` with one draft at stake:
    min(q, p/l) + (1 − β)·normalize(max(0, p − l·q)), β = Σ min(q, p/l)."""
    accepted = torch.minimum(q, p / lenience)
    return accepted + (1.0 - accepted.sum(-1, keepdim=True)) * residual(p, lenience * q)


# ----------------------------------------------------------------------------- speculative cascades

CASCADE_RULES = ("chow", "diff", "opt")


def defer(rule: str, alpha: float, p: Tensor, q: Tensor) -> Tensor:
    """1.0 where the cascade defers to the target (π = p), 0.0 where it keeps the draft (π = q)."""
    top_q = q.max(-1).values
    if rule == "chow":  # the draft is unsure: max q < 1 − α
        out = top_q < 1.0 - alpha
    elif rule == "diff":  # the target is surer by more than α: max q < max p − α
        out = top_q < p.max(-1).values - alpha
    elif rule == "opt":  # ... by more than α·TV(p, q): max q < max p − α·TV(p, q)
        out = top_q < p.max(-1).values - alpha * total_variation(p, q)
    else:
        raise ValueError(f"cascade rule must be one of {CASCADE_RULES}, got {rule!r}")
    return out.float()


class Cascade(Ensemble):
    """Token-level speculative cascade: the ensemble with w = 1[defer] from `rule` at `alpha`."""

    kind = "cascade"
    records_w = True  # mean w = the share of emitted tokens whose position deferred to the target

    def __init__(self, rule: str, alpha: float) -> None:
        super().__init__()
        if rule not in CASCADE_RULES:
            raise ValueError(f"cascade rule must be one of {CASCADE_RULES}, got {rule!r}")
        self.rule, self.alpha = rule, float(alpha)

    def weights(self, p, q, h_draft, h_target) -> Tensor:
        return defer(self.rule, self.alpha, p, q)

    def extra_repr(self) -> str:
        return f"rule={self.rule}, alpha={self.alpha}"


# ----------------------------------------------------------------------------- typical acceptance


def entropy(p: Tensor) -> Tensor:
    """H(p) = −Σ p log p (0·log 0 = 0)."""
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def typical_threshold(p: Tensor, epsilon: float, delta: float) -> Tensor:
    """min(ε, δ·exp(−H(p))) per position."""
    return torch.clamp(delta * torch.exp(-entropy(p)), max=epsilon)


def typical_truncation(p: Tensor, epsilon: float, delta: float) -> Tensor:
    """typical(p): p restricted to the tokens that pass typical acceptance's test, renormalised
    (never empty: δ ≤ 1 keeps argmax p, since p_max ≥ exp(−H(p)))."""
    # typical(p)(x) = p(x)·1[p(x) ≥ τ] / Σ_y p(y)·1[p(y) ≥ τ],  τ = min(ε, δ·exp(−H(p)))
    kept = torch.where(p >= typical_threshold(p, epsilon, delta).unsqueeze(-1), p, 0.0)
    return kept / kept.sum(-1, keepdim=True)


class TypicalAcceptance(Verifier):
    """Medusa's typical acceptance: accept x if p(x) > min(ε, δ·exp(−H(p)))."""

    kind = "typical"

    def __init__(self, epsilon: float = 0.09, delta: float = 0.3) -> None:
        super().__init__()
        self.epsilon, self.delta = float(epsilon), float(delta)
        if not (0.0 < self.epsilon <= 1.0 and 0.0 < self.delta <= 1.0):
            raise ValueError(f"TypicalAcceptance needs epsilon and delta in (0, 1], got {epsilon}, {delta}")

    def accept(self, p, q, x, w, generator) -> Tensor:
        return at_token(p, x) > typical_threshold(p, self.epsilon, self.delta)

    def rejection(self, p, q, w) -> Tensor:
        return typical_truncation(p, self.epsilon, self.delta)

    def bonus(self, p, q: Any, w) -> Tensor:
        return typical_truncation(p, self.epsilon, self.delta)

    def extra_repr(self) -> str:
        return f"epsilon={self.epsilon}, delta={self.delta}"
