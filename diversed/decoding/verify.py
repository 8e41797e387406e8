"""Verification: the maths as pure tensor functions, and verifiers as pluggable acceptance rules.

Notation (the paper's): p is the target distribution, q the draft distribution at a position,
both after temperature and, if asked, the same top-k / top-p truncation (`truncate`, transformers'
warpers); a drafted token x ~ q. A verification rule decides three things:
  1. the accept test for each drafted token (the engine keeps the longest accepted prefix);
  2. the distribution sampled at the first rejection;
  3. the distribution of the bonus token after a fully accepted round;
and their greedy counterparts (tokens instead of distributions). `Verifier` is that interface.

The ensemble family is one implementation: w in [0, 1] is the weight on the TARGET and drafts are
checked against the blend

    v = w·p + (1 − w)·q          (w = 1: lossless, w = 0: every draft token is accepted)

accepting x with probability min(1, 1 − w + w·p(x)/q(x)), sampling normalize(max(0, p − q)) at a
rejection, and drawing the bonus from v ("ensemble" bonus) or p ("target" bonus). `Lossless`,
`StaticEnsemble` and `DynamicEnsemble` (DIVERSED: w from a head over both models' last hidden
states) differ only in where w comes from.

Everything here is a pure tensor function or a small module; the decoding loop that calls them
lives in `engine.py`. All probabilities are float32 whatever the models' dtype, so the accept
test never sees bf16 rounding. This module does not touch models or caches.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

# ----------------------------------------------------------------------------- distributions


def probs_from_logits(
    logits: Tensor, temperature: float, top_k: int | None = 0, top_p: float = 1.0
) -> Tensor:
    """softmax(truncate(logits / T, top_k, top_p)) in float32 (T > 0); by default no truncation."""
    logits = logits.float()
    logits = logits if temperature == 1.0 else logits / temperature  # x / 1 == x
    return torch.softmax(truncate(logits, top_k, top_p), dim=-1)


def truncate(logits: Tensor, top_k: int | None = 0, top_p: float = 1.0) -> Tensor:
    """transformers' `TopKLogitsWarper` then `TopPLogitsWarper` (min_tokens_to_keep = 1) on the
    temperature-scaled logits [..., V], as `generate` applies them when sampling: the tokens they
    drop get −inf. top_k = 0 or None and top_p = 1 keep everything (and return `logits` itself).

    top-k: keep x iff logit(x) >= the k-th largest logit (every token tied with the k-th is kept);
    top-p: with the tokens sorted by ascending probability π (softmax after top-k), drop x iff
    Σ_{y ≤ x} π(y) <= 1 − top_p: the smallest set of the most probable tokens with mass >= top_p
    stays, and the most probable token always does.
    """
    if not top_k and top_p >= 1.0:
        return logits
    flat = logits.reshape(-1, logits.shape[-1])  # the warpers take [rows, V]
    if top_k:
        flat = TopKLogitsWarper(int(top_k))(None, flat)
    if top_p < 1.0:
        flat = TopPLogitsWarper(float(top_p))(None, flat)
    return flat.view(logits.shape)


def mix(p: Tensor, q: Tensor, w: Tensor | float) -> Tensor:
    """v = w·p + (1 − w)·q, with w broadcast over the vocabulary ([..., V] <- [...])."""
    if isinstance(w, Tensor):
        w = w.unsqueeze(-1)
    # Same operation order as transformers' greedy ensemble path, so argmax ties agree exactly.
    return w * p + (1.0 - w) * q


# How our engine and loop draw, recorded with every point that samples and every setting the bench
# times (`sampler_name`: "transformers" or "llama.cpp" where those libraries sample, "greedy" at
# T = 0): the law is the same whatever the scheme, but which tokens a seed gives is not, so a point
# is reproduced token for token only by the scheme that drew it. A new scheme gets a new name.
# Records written before this was recorded have none: the exponential race drew them until
# 2026-11-28 23:47 UTC (b920a56); "inversion" (`sample`) after, until the static ensemble's bonus
# from v took a coin first (`Verifier.bonus_coin`, 2026-11-29): "inversion+coin" since. Only a
# rule with a coin (the static ensemble, sampling, bonus from v) draws other tokens under it.
SAMPLER = "inversion+coin"


def sampler_name(temperature: float, decoder: str | None = None) -> str:
    """The name a record gives the scheme that drew its tokens: "greedy" at T = 0 (an argmax, whoever
    takes it), else `decoder`'s own scheme where another library samples ("transformers", "llama.cpp"),
    else ours (`SAMPLER`)."""
    if float(temperature) == 0:
        return "greedy"
    return decoder or SAMPLER


def sample(probs: Tensor, generator: torch.Generator | None = None, noise: Tensor | None = None) -> Tensor:
    """One categorical sample per row of `probs` ([..., V] -> [...]), without a host sync.

    By inversion: with u ~ U[0, 1), x = the first id whose cumulative mass exceeds u·Σ_y p(y),
    i.e. F(x − 1) <= u·F(V) < F(x) with F the running sum (in float64, so that the ids at the end of
    a 152k vocabulary keep their mass); an id with p(x) = 0 has an empty interval and is never drawn.
    One uniform per row, where the exponential race (argmax p(x)/E_x, E_x ~ Exp(1)) drew V
    exponentials: at V = 151,936 on 2 CPU cores 2.38 ms a row against 0.17 here
    (`scripts/sampler_cost.py`).
    `noise` holds the u ([...], in [0, 1)) if the caller drew them (e.g. for rows that left a batch
    too, so that the others' draws do not depend on them); else they are drawn here. A row with no
    mass (all zeros, or a NaN) gives its last id: a law that is not one is the caller's to catch (the
    engine warns of logits that are not finite, `stats.py`).
    """
    if noise is not None and noise.shape != probs.shape[:-1]:
        raise ValueError(
            f"sample: noise of shape {tuple(noise.shape)}, one u per row needs {tuple(probs.shape[:-1])}"
        )
    V = probs.shape[-1]
    cdf = probs.reshape(-1, V).double().cumsum(-1)  # F(x) = Σ_{y <= x} p(y)
    u = (
        torch.rand(cdf.shape[0], dtype=torch.float64, device=probs.device, generator=generator)
        if noise is None
        else noise.reshape(-1).to(torch.float64)
    )
    # x = min{x : F(x) > u·F(V)}, u·F(V) kept under F(V) (rounding, a u of 1): the last id with mass
    total = cdf[:, -1:]
    at = torch.minimum(u.unsqueeze(-1) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, at, right=True).squeeze(-1).clamp_max(V - 1).view(probs.shape[:-1])


def total_variation(p: Tensor, q: Tensor) -> Tensor:
    """TV(p, q) = ½·Σ_x |p(x) − q(x)|."""
    return 0.5 * (p - q).abs().sum(dim=-1)


# ----------------------------------------------------------------------------- accept / reject


def ensemble_accept(p_x: Tensor, q_x: Tensor, w: Tensor | float, u: Tensor) -> Tensor:
    """Accept draft token x ~ q with probability min(1, v(x)/q(x)) = min(1, 1 − w + w·p(x)/q(x)).

    With u ~ U[0, 1): accept iff u < v(x)/q(x)  <=>  u·q(x) < v(x). Written without the division,
    so p(x) = 0, q(x) = 0, w = 0, w = 1 and p == q give no NaN.
    """
    v_x = w * p_x + (1.0 - w) * q_x
    return u * q_x < v_x


def residual(p: Tensor, q: Tensor) -> Tensor:
    """Distribution of the token emitted at the first rejection.

    normalize(max(0, v − q)) = normalize(w·max(0, p − q)) = normalize(max(0, p − q)) for w > 0
    (a rejection never happens at w = 0). If the mass underflows (p ≈ q), sample from p.
    """
    r = (p - q).clamp_min(0.0)
    mass = r.sum(dim=-1, keepdim=True)
    tiny = torch.finfo(r.dtype).tiny
    return torch.where(mass > tiny, r / mass.clamp_min(tiny), p)


def acceptance_probability(p: Tensor, q: Tensor, w: Tensor | float) -> Tensor:
    """Expected acceptance of one draft token: Σ_x min(q, v) = 1 − TV(q, v) = 1 − w·TV(p, q)."""
    return 1.0 - w * total_variation(p, q)


# ----------------------------------------------------------------------------- the interface


class Verifier(nn.Module):
    """A verification rule (see the module docstring). Per round the engine calls, at the n drafted
    positions (p, q: [b, n, V]; x: [b, n]; hidden states [b, n, H] if `needs_hidden`):

        w = weights(p, q, h_draft, h_target)    a per-position parameter ([b, n], a float or None),
                                                computed once and passed to the methods below
        accept(p, q, x, w, generator)           [b, n] bool: the accept test of each draft
        rejection(p_k, q_k, w_k)                [b, V]: what is sampled at the first rejection k
        bonus(p_L, q_L, w_L)                    [b, V]: what is sampled after a fully accepted round;
                                                q_L and w_L are None unless `bonus_needs_draft`;
                                                with `bonus_coin` a, the engine draws it as the
                                                mixture a·bonus(p_L) + (1 − a)·q_L instead (a rule
                                                that overrides `bonus` overrides `bonus_coin` too)

    and, greedy, `greedy_accept`, `greedy_rejection` and `greedy_bonus` (token ids). The defaults
    are standard speculative decoding (accept with probability min(1, p(x)/q(x)), the residual
    normalize(max(0, p − q)) at a rejection, the bonus from p; greedy: accept while x = argmax p),
    so a rule overrides only what it changes. Greedy methods take an argmax of what they are given:
    logits where `probs_needed(greedy)` is False, and the target's logits for the bonus without the
    draft (argmax is the same, and it is what `generate` takes). With `records_w`, the statistics
    keep the mean of w over emitted tokens (a bonus drawn from p counts as w = 1).
    """

    kind: str = "verifier"
    needs_hidden: bool = False  # gets both models' last hidden states in `weights`
    records_w: bool = False

    def probs_needed(self, greedy: bool) -> bool:
        """Whether p and q must be probabilities (else logits are enough)."""
        return True

    def bonus_needs_draft(self, bonus_token: str) -> bool:
        """Whether the bonus distribution depends on q after the last draft (the engine then runs
        the draft once more on x_n, which it needs next round anyway)."""
        return False

    def bonus_coin(self) -> float | None:
        """The share a where a fully accepted round's bonus law is the mixture
        a·bonus(p, None, None) + (1 − a)·q, a known before q: the engine then tosses a coin first
        (bonus from p with probability a) and calls the draft only for rows whose coin chose q. None
        (the default): no such split (the bonus needs no q, or its weight needs the draft there)."""
        return None

    def check_pair(self, target: nn.Module, draft: nn.Module) -> None:
        """Raise ValueError if this verifier cannot be used with the pair (before any model call)."""

    def weights(
        self, p: Tensor, q: Tensor, h_draft: Tensor | None, h_target: Tensor | None
    ) -> Tensor | float | None:
        return None

    def accept(self, p: Tensor, q: Tensor, x: Tensor, w: Any, generator: torch.Generator | None) -> Tensor:
        # accept x with probability min(1, p(x)/q(x)): u·q(x) < p(x), u ~ U[0, 1)
        return ensemble_accept(at_token(p, x), at_token(q, x), 1.0, uniform(x, generator))

    def rejection(self, p: Tensor, q: Tensor, w: Any) -> Tensor:
        return residual(p, q)

    def bonus(self, p: Tensor, q: Tensor | None, w: Any) -> Tensor:
        return p

    def greedy_accept(self, p: Tensor, q: Tensor, x: Tensor, w: Any) -> Tensor:
        return x == p.argmax(-1)

    def greedy_rejection(self, p: Tensor, q: Tensor, w: Any) -> Tensor:
        return p.argmax(-1)

    def greedy_bonus(self, p: Tensor, q: Tensor | None, w: Any) -> Tensor:
        return p.argmax(-1)


def at_token(probs: Tensor, x: Tensor) -> Tensor:
    """probs[..., x] for each position: [b, n, V], [b, n] -> [b, n]."""
    return probs.gather(-1, x.unsqueeze(-1)).squeeze(-1)


def uniform(x: Tensor, generator: torch.Generator | None) -> Tensor:
    """u ~ U[0, 1) per drafted token."""
    return torch.rand(x.shape, device=x.device, generator=generator)


# ----------------------------------------------------------------------------- the ensemble family


class Ensemble(Verifier):
    """Verification against v = w·p + (1 − w)·q; subclasses say where w comes from (`weights`)."""

    def bonus_needs_draft(self, bonus_token: str) -> bool:
        return bonus_token == "ensemble"  # the bonus from v needs q after the last draft

    def accept(self, p, q, x, w, generator) -> Tensor:
        # accept with probability min(1, 1 − w + w·p(x)/q(x))
        return ensemble_accept(at_token(p, x), at_token(q, x), w, uniform(x, generator))

    def rejection(self, p, q, w) -> Tensor:
        return residual(p, q)  # normalize(max(0, v − q)) = normalize(max(0, p − q))

    def bonus(self, p, q, w) -> Tensor:
        return p if q is None else mix(p, q, w)  # "target" bonus: p; "ensemble" bonus: v

    def greedy_accept(self, p, q, x, w) -> Tensor:
        return x == mix(p, q, w).argmax(-1)  # accept x_i while x_i == argmax v_i

    def greedy_rejection(self, p, q, w) -> Tensor:
        return mix(p, q, w).argmax(-1)

    def greedy_bonus(self, p, q, w) -> Tensor:
        return p.argmax(-1) if q is None else mix(p, q, w).argmax(-1)


class Lossless(Ensemble):
    """Standard speculative decoding: v = p (w = 1); the output is distributed exactly as the target."""

    kind = "lossless"

    def probs_needed(self, greedy: bool) -> bool:
        return not greedy  # greedy lossless only ever compares argmaxes of logits

    def bonus_needs_draft(self, bonus_token: str) -> bool:
        return False  # at w = 1, v = p: nothing to blend

    def weights(self, p, q, h_draft, h_target) -> float:
        return 1.0

    def greedy_accept(self, p, q, x, w) -> Tensor:
        return x == p.argmax(-1)

    def greedy_rejection(self, p, q, w) -> Tensor:
        return p.argmax(-1)

    def extra_repr(self) -> str:
        return "w=1"


class StaticEnsemble(Ensemble):
    """The training-free static ensemble: one fixed target weight w for every position."""

    kind = "static"

    def __init__(self, weight: float) -> None:
        super().__init__()
        weight = float(weight)
        if not 0.0 <= weight <= 1.0:
            raise ValueError(
                f"StaticEnsemble weight must be in [0, 1] (the weight on the TARGET: 1 = lossless, "
                f"0 = accept every draft token), got {weight}"
            )
        self.weight = weight

    def weights(self, p, q, h_draft, h_target) -> Tensor:
        return torch.full(p.shape[:-1], self.weight, dtype=torch.float32, device=p.device)

    def bonus_coin(self) -> float:
        # v = w·p + (1 − w)·q: x ~ p with probability w (no draft call), else x ~ q
        return self.weight

    def extra_repr(self) -> str:
        return f"w={self.weight}"


class DynamicEnsemble(Ensemble):
    """DIVERSED: w_i = head(h_draft_i, h_target_i), the models' final hidden states at position i.

    A head is any module mapping (draft_hidden [B,T,Hd], target_hidden [B,T,Ht]) to w [B,T] in
    [0, 1]; heads with `uses_distributions = True` also receive p=, q= (free at verification). A
    head with a `check_pair(target, draft)` method (`heads.WeightHead`: its hidden sizes) is asked
    whether it fits the pair before any model call.
    """

    kind = "dynamic"
    needs_hidden = True
    records_w = True

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def weights(self, p, q, h_draft, h_target) -> Tensor:
        return run_head(self.head, h_draft, h_target, p, q).to(p.device)

    def check_pair(self, target: nn.Module, draft: nn.Module) -> None:
        """The head's own check, where it has one (`WeightHead.check_pair`: its hidden sizes)."""
        check = getattr(self.head, "check_pair", None)
        if callable(check):
            check(target, draft)


def run_head(
    head: nn.Module, h_draft: Tensor, h_target: Tensor, p: Tensor | None = None, q: Tensor | None = None
) -> Tensor:
    """w = head(h_draft, h_target) in float32, the head run in its own dtype and device (bf16
    models, fp32 head); heads with `uses_distributions` also get p= and q=."""
    ref = next(head.parameters(), None)
    if ref is not None:
        h_draft = h_draft.to(device=ref.device, dtype=ref.dtype)
        h_target = h_target.to(device=ref.device, dtype=ref.dtype)
    if getattr(head, "uses_distributions", False):
        return head(h_draft, h_target, p=p.to(h_draft.device), q=q.to(h_draft.device)).float()
    return head(h_draft, h_target).float()
