"""What the draft learns from: the target's law at the scored positions, and samples that keep it.

- `ROLLOUTS`: whose completions the draft is scored on (`distill.rollout`): its own (on-policy),
  the target's, or either at random per batch; `DIVERGENCES`: the D it minimises there.
- `divergence(p_logits, q_logits, kind)`: D(p, q) per position from both models' logits: forward
  KL (DistillSpec's default), total variation (1 − TV is a draft token's acceptance probability)
  or reverse KL; over a restricted draft's support where q = 0 elsewhere.
- `teacher_top` / `coarse_divergence`: the target's law kept as its top K ids over the draft's
  support plus the mass of the rest (K + 1 outcomes), and D between the two laws coarsened so.
  Exact with K = |S|; never larger otherwise (coarsening cannot raise an f-divergence) and it
  still matches the tail's total mass. What lets a run keep the target's law for every scored
  position of every sample (about 1.5 KB per position at K = 256 instead of 4 bytes per id).
- `TeacherSample`, `write_samples`, `read_samples`: samples drawn once (`distill.reuse`) with that
  law, in one file per run (`<run dir>/teacher_samples.pt`), written atomically.

The names are the settings' (`training/settings.py` reads them from here). It does not draw samples or train
(`distill.py` does).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from diversed.files.atomic import write_file

log = logging.getLogger(__name__)
DIVERGENCES = ("forward_kl", "tvd", "reverse_kl")
ROLLOUTS = ("draft", "target", "mixed")

# ----------------------------------------------------------------------------- the divergences (pure)


def divergence(p_logits: Tensor, q_logits: Tensor, kind: str, temperature: float = 1.0) -> Tensor:
    """D(p, q) per position ([..., V] logits -> [...]), in float32; p the target, q the draft.

    forward_kl = Σ p (log p − log q);  tvd = ½ Σ |p − q|;  reverse_kl = Σ q (log q − log p).
    A draft with a restricted vocabulary (draft_vocab.py) has q = 0 outside it: forward KL then
    sums over q's support only (p's mass outside is a constant the draft cannot change), and the
    0 · log 0 terms count as 0.
    """
    log_p = torch.log_softmax(p_logits.float() / temperature, -1)
    log_q = torch.log_softmax(q_logits.float() / temperature, -1)
    support = log_q.isfinite()  # q > 0 (masked first: a −inf in a product's backward gives NaN)
    log_q = log_q.masked_fill(~support, 0.0)
    if kind == "forward_kl":
        return (log_p.exp() * (log_p - log_q) * support).sum(-1)
    if kind == "reverse_kl":
        return (log_q.exp() * support * (log_q - log_p)).sum(-1)
    if kind == "tvd":
        return 0.5 * (log_p.exp() - log_q.exp() * support).abs().sum(-1)
    raise ValueError(f"distill.divergence must be one of {DIVERGENCES}, got {kind!r}")


class TeacherTop(NamedTuple):
    """The target's distribution at scored positions coarsened to K + 1 outcomes of the draft's
    support S (the ids the draft can propose): S's K most likely ids, and the rest of S. The mass
    outside S, which the draft cannot propose, is 1 − Σ p_top − p_rest."""

    logp: Tensor  # [..., K] log p of the top ids
    ids: Tensor  # [..., K] their positions in S (vocabulary ids where S is the whole vocabulary)
    rest: Tensor  # [...] log p(S minus the top ids); −inf where K covers S


def _log_minus(a: Tensor, b: Tensor) -> Tensor:
    """log(e^a − e^b) for b ≤ a (−inf where equal), without leaving log space."""
    return a + torch.log1p(-torch.exp((b - a).clamp(max=0.0)))


def teacher_top(p_logits: Tensor, support: Tensor | None, k: int, temperature: float = 1.0) -> TeacherTop:
    """`p_logits` ([..., V]) at `temperature` kept as its top `k` ids within `support` (positions
    in S; None: S is the vocabulary) and the log mass of the rest of S."""
    log_p = torch.log_softmax(p_logits.float() / temperature, -1)
    if support is not None:
        log_p = log_p[..., support.to(log_p.device)]
    logp, ids = log_p.topk(min(int(k), log_p.shape[-1]), -1)
    return TeacherTop(logp, ids, _log_minus(torch.logsumexp(log_p, -1), torch.logsumexp(logp, -1)))


def coarse_divergence(teacher: TeacherTop, q_logits: Tensor, kind: str, temperature: float = 1.0) -> Tensor:
    """D(p, q) per position between the two laws coarsened to `teacher`'s K + 1 outcomes (its top
    ids, the rest of S); `q_logits` are the draft's over S ([..., |S|]). With K = |S| this is
    `divergence` exactly; with fewer ids it is never larger (coarsening cannot raise an
    f-divergence), and it still matches the rest's total mass, so q cannot drop p's tail.

    forward_kl = Σ_top p (log p − log q) + p_rest (log p_rest − log q_rest);
    tvd = ½ (Σ_top |p − q| + |p_rest − q_rest| + p_out);  reverse_kl = the forward form with p, q swapped.
    """
    log_q = torch.log_softmax(q_logits.float() / temperature, -1)
    lq = log_q.gather(-1, teacher.ids.long())
    # log q_rest = log(1 − Σ_top q), its argument kept below 0 so that K = |S| stays finite (q_rest ≥ ~1e-7)
    lq_rest = torch.log1p(-torch.exp(torch.logsumexp(lq, -1).clamp(max=-1e-7)))
    logp, rest = teacher.logp.float(), teacher.rest.float()
    has_rest = rest > float("-inf")  # p_rest > 0 (not where K covers S)
    rest_safe = torch.where(has_rest, rest, torch.zeros_like(rest))  # no −inf in a product's backward
    p_top, p_rest = logp.exp(), torch.where(has_rest, rest_safe.exp(), torch.zeros_like(rest))
    if kind == "forward_kl":
        return (p_top * (logp - lq)).sum(-1) + p_rest * (rest_safe - lq_rest)
    q_top, q_rest = lq.exp(), torch.where(has_rest, lq_rest.exp(), torch.zeros_like(lq_rest))
    if kind == "reverse_kl":
        return (q_top * (lq - logp)).sum(-1) + q_rest * (lq_rest - rest_safe)
    if kind == "tvd":
        p_out = (1.0 - p_top.sum(-1) - p_rest).clamp_min(0.0)
        return 0.5 * ((p_top - q_top).abs().sum(-1) + (p_rest - q_rest).abs() + p_out)
    raise ValueError(f"distill.divergence must be one of {DIVERGENCES}, got {kind!r}")


class TeacherSample(NamedTuple):
    """One training row drawn once (`distill.reuse`): a prompt and the target's completion, the
    slots whose next token is scored, and the target's coarsened law there (half precision)."""

    ids: Tensor  # [P + C] token ids, no padding
    prompt: int  # P
    at: Tensor  # [S] scored slots (slot i predicts token i + 1)
    teacher: TeacherTop  # [S, K], [S, K], [S]
    # [P + C, H]: the draft's hidden states after its frozen bottom (`distill.freeze_layers`), computed
    # once when the fit starts (`draft_module.FrozenBottom`); never written to the samples' file
    bottom: Tensor | None = None


# ----------------------------------------------------------------------------- the samples' file


_SAMPLE_FIELDS = ("ids", "prompt", "at", "logp", "top", "rest")


def write_samples(path: Path, key: str, samples: list[TeacherSample], support: Tensor | None) -> None:
    """Write `samples` to `path` atomically (`atomic.write_file`): a kill leaves the old file or none."""
    columns = {
        "ids": [s.ids for s in samples],
        "prompt": [s.prompt for s in samples],
        "at": [s.at for s in samples],
        "logp": [s.teacher.logp for s in samples],
        "top": [s.teacher.ids for s in samples],
        "rest": [s.teacher.rest for s in samples],
    }
    buffer = io.BytesIO()
    torch.save({"key": key, "support": None if support is None else support.cpu(), **columns}, buffer)
    write_file(
        path, buffer.getbuffer()
    )  # a temporary file of this process's own: every process of a DDP run writes


def read_samples(path: Path, support: Tensor | None, key: str | None = None) -> list[TeacherSample] | None:
    """The samples in `path` (written by `write_samples`); None if `key` is given and differs. A
    file drawn for another draft support is refused (its ids would mean other tokens)."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a torn or foreign file
        raise ValueError(
            f"{path}: not a file of target samples ({type(e).__name__}: {e}); delete it to draw again"
        ) from None
    if key is not None and data.get("key") != key:
        log.info(f"{path} holds samples drawn for other examples or settings: drawing again")
        return None
    theirs = data.get("support")
    if (support is None) != (theirs is None) or (
        support is not None and not torch.equal(support.cpu(), theirs)
    ):
        raise ValueError(
            f"{path}: drawn for a draft with another vocabulary support; draw them again for this draft"
        )
    return [
        TeacherSample(ids, int(p), at, TeacherTop(lp, ti, rest))
        for ids, p, at, lp, ti, rest in zip(*(data[k] for k in _SAMPLE_FIELDS), strict=True)
    ]
