"""Token-by-token decoding on the engine's own forward path: the fair baseline for speculation.

`autoregressive_generate(target, input_ids, ...)` decodes with the target alone, one token per
step, through the same `SlotModel` calls, KV caches, stopping (EOS, length budget, a task's
`stop` callback through `HostStopCheck`) and batch handling (finished rows leave the batch) as
`speculative_generate`, and returns the same `(sequences, stats)`. So a speedup measured against
it comes from speculation, not from a different forward path (transformers' `generate` is a
separate reference). Greedy takes argmax of the logits, as `generate` does.

With a draft and an ensemble verifier it samples each token from v = w·p + (1 − w)·q (the
verifier's bonus distribution given both models), one target and one draft forward per token:
what a training rollout from v costs without speculation. With a verifier and no draft, each step is
the engine's round without drafts: the token is drawn from the verifier's bonus law given p alone,
`verifier.bonus(p, None, None)` (a rule whose bonus needs q is refused); with `TypicalAcceptance`
that is typical(p), p truncated as typical acceptance truncates it (`rules.typical_truncation`): the
baseline that says how much of typical acceptance's quality the truncation alone gives. Greedy, it
takes `verifier.greedy_bonus` of the logits, argmax as without one. Sampled p and q are the
engine's: softmax(logits / T), truncated alike if asked (`top_k`, `top_p`).

`record` hands the target's own laws to the caller as it decodes (`Step`): at step t the raw
logits at slot P + t − 1, which predict that step's token, and at step 0 also the final hidden
states of every prompt slot with the head that makes them logits (slot i predicts the prompt's
token i + 1). A caller that needs the target's law over its whole sample (distillation's teacher,
`draft_module.py`) then needs no second forward over prompt + completion.

Statistics: every step is a round without drafts that emits one token (`rounds.Round.single`,
counted by the engine's `stats.RowCounter`: rounds = tokens per row, acceptance undefined, tokens
per target call 1). It does not time anything beyond `wall_time_s`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from diversed.decoding.draft_vocab import vocab_size
from diversed.decoding.engine import SpeculativeOutput
from diversed.decoding.forward import SlotModel
from diversed.decoding.inputs import (
    check_decoding,
    check_prompts,
    device_of,
    shared_vocab_size,
    special_tokens,
)
from diversed.decoding.prompt_cache import PromptCache
from diversed.decoding.rounds import Round
from diversed.decoding.stats import RowCounter
from diversed.decoding.stopping import HostStopCheck
from diversed.decoding.verify import Ensemble, Verifier, probs_from_logits, sample


class Step(NamedTuple):
    """What `autoregressive_generate(..., record=f)` hands `f` once per decoding step, after the
    target's forward and before the step's token is drawn (tensors on the device, valid during the
    call only: keep what you need, reduced).

    With P the padded prompt width and rows left-padded as given:
      logits[j] = the target's float32 logits over the vocabulary at slot P + step − 1 of row
                  rows[j] (softmax(logits / T) is the law its `step`-th new token is drawn from,
                  before truncation), for every row still decoding; a row's laws for the tokens
                  it keeps are those of steps 0 .. new_tokens − 1 (a row leaves after EOS, its
                  budget or its `stop`; `stop` may drop that step's token);
      prompt    = at step 0 only (None after): the target's final hidden states [B, P, H] (after
                  its final norm, in the forward's dtype) at every prompt slot, so that
                  head(prompt[:, i]) are the logits at slot i, the law of slot i + 1's token (for
                  text slots i < P − 1; padding slots hold garbage). Apply `head` a few rows at a
                  time: [B, P, V] logits may not fit;
      head      = final hidden states [..., n, H] -> float32 logits [..., n, V], the forward's own
                  LM head (`SlotModel.head`; checked at step 0 against `logits`).
    """

    step: int
    rows: Tensor  # [b] each row's index in the batch as it started
    logits: Tensor  # [b, V]
    prompt: Tensor | None  # [B, P, H] at step 0
    head: Callable[[Tensor], Tensor]


@torch.inference_mode()
def autoregressive_generate(
    target: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    draft: nn.Module | None = None,
    verifier: Verifier | None = None,
    max_new_tokens: int = 128,
    do_sample: bool = False,
    temperature: float = 1.0,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    generator: torch.Generator | None = None,
    stop: Callable[[list[int], int], int | None] | None = None,
    top_k: int | None = 0,
    top_p: float = 1.0,
    record: Callable[[Step], None] | None = None,
    prompt_cache: PromptCache | None = None,
) -> SpeculativeOutput:
    """Generate up to `max_new_tokens` per row, one target forward (and, with `draft` and
    `verifier`, one draft forward) per token: from p, from v (`draft` and an ensemble `verifier`),
    or from the bonus law of a `verifier` given p alone (no `draft`: typical acceptance's typical(p)).
    Prompts must be left-padded; `stop`, `top_k`, `top_p` and `prompt_cache` are as in
    `speculative_generate` (p and q truncated alike when sampling); `record` is called with each
    step's target laws (`Step`) and changes nothing drawn. Returns `(sequences, stats)`."""
    check_decoding(max_new_tokens, temperature, top_k, top_p)
    _check_inputs(
        target, input_ids, attention_mask, draft, verifier, record=record, cache=prompt_cache, stop=stop
    )
    t_start = time.perf_counter()
    device = input_ids.device
    greedy = not do_sample or float(temperature) == 0.0
    tau = 1.0 if greedy else float(temperature)
    k, top = (0, 1.0) if greedy else (top_k, top_p)  # truncation when sampling only, as in the engine
    dist = lambda logits: probs_from_logits(logits, tau, k, top)  # noqa: E731
    eos_ids, pad = special_tokens(target, eos_token_id, pad_token_id)
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
    vocab = shared_vocab_size(target, draft) if draft is not None else vocab_size(target)
    hidden = verifier is not None and verifier.needs_hidden
    models = [SlotModel(target, vocab, hidden)] + (
        [SlotModel(draft, vocab, hidden)] if draft is not None else []
    )
    B, P = input_ids.shape
    b = _Batch.of(input_ids, attention_mask, pad, max_new_tokens)
    counter = RowCounter(B, 0, device, verifier is not None and verifier.records_w, max_new_tokens)
    host = HostStopCheck(B, max_new_tokens, stop, vocab) if stop is not None else None
    if prompt_cache is not None and P > 1:  # the prompt but its last token in a pass of its own (kept)
        for m in models:
            m.prefill(b.ids, b.mask, b.pos, P - 1, prompt_cache)

    for step in range(max_new_tokens):
        logits_p, h_t, drafted = _forward(models, b, P, step, record, hidden)
        # noise for every row of the batch as it started, rows that left included: a row's draws do
        # not depend on when the others end
        noise = (
            None if greedy else torch.rand(B, dtype=torch.float64, device=device, generator=generator)[b.rows]
        )
        x, w = _draw(verifier, greedy, dist, logits_p, h_t, drafted, noise)
        b.ids[:, P + step] = x
        done_h = _emit(b, counter, host, x, w, eos, step, max_new_tokens)
        if any(done_h) and not _leave(b, done_h, host, models):
            break

    stats = counter.finish(
        target=models[0],
        draft=models[1] if draft is not None else None,
        verifier="autoregressive" if verifier is None else f"autoregressive-{verifier.kind}",
    )
    return SpeculativeOutput.of(input_ids, b.out, stats, t_start)


def _check_inputs(target, input_ids, attention_mask, draft, verifier, *, record, cache, stop) -> None:
    """A ValueError naming the first bad input (`check_decoding` has checked the decoding options)."""
    check_prompts(input_ids, attention_mask, device_of(target))
    if draft is not None and verifier is None:
        raise ValueError("give both draft and verifier (sampling from v) or no draft (the target alone)")
    if draft is not None and not isinstance(verifier, Ensemble):
        raise ValueError(
            f"sampling from v needs an ensemble verifier (v = w·p + (1 − w)·q), got {type(verifier).__name__}"
        )
    if (
        draft is None
        and verifier is not None
        and (verifier.bonus_needs_draft("ensemble") or verifier.needs_hidden)
    ):
        raise ValueError(
            "without a draft, tokens come from the verifier's bonus law given p alone; "
            f"{type(verifier).__name__}'s needs the draft: give the draft"
        )
    if record is not None and not callable(record):
        raise ValueError(f"record must be a callable (Step -> None), got {type(record).__name__}")
    if record is not None and cache is not None:
        raise ValueError("record needs the prompt's states from step 0's forward: give no prompt_cache")
    if stop is not None and not callable(stop):
        raise ValueError(
            f"stop must be a callable (new tokens -> tokens to keep or None), got {type(stop).__name__}"
        )


@dataclass
class _Batch:
    """The rows still decoding (`rows`: each one's index in the batch as it started) and their slots:
    the prompt, then one per new token (no holes: nothing is rejected); `out` holds every row's new
    tokens (its last column a sink for tokens not kept)."""

    rows: Tensor
    ids: Tensor
    mask: Tensor
    pos: Tensor
    out: Tensor
    none: Tensor  # [B] zeros: each step's k (no drafts), sliced to the rows left
    full: Tensor  # [B] True: each step's `full`

    @classmethod
    def of(cls, input_ids: Tensor, attention_mask: Tensor | None, pad: int, max_new: int) -> _Batch:
        B, device = input_ids.shape[0], input_ids.device
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        ids = torch.cat([input_ids, input_ids.new_full((B, max_new), pad)], 1)
        mask = torch.cat([attention_mask.long(), attention_mask.new_ones(B, max_new).long()], 1)
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        out = torch.full((B, max_new + 1), pad, dtype=torch.long, device=device)  # last col: sink
        rows = torch.arange(B, device=device)
        return cls(rows, ids, mask, pos, out, rows.new_zeros(B), rows.new_ones(B, dtype=torch.bool))


def _forward(models: list[SlotModel], b: _Batch, P: int, step: int, record, hidden: bool):
    """The step's forwards over slots [0, P + step): the target's logits at the last slot and its
    hidden state there (with `record`, handed over, and at step 0 the prompt's states with them), and
    the draft's (logits, hidden states) where there is a draft (else None)."""
    # with `record`, the prefill also keeps the target's final hidden states at every prompt slot
    states = P if record is not None and step == 0 else 0
    outs = [m.forward(b.ids, b.mask, b.pos, P + step, keep=1, states=states) for m in models[:1]] + [
        m.forward(b.ids, b.mask, b.pos, P + step, keep=1) for m in models[1:]
    ]
    for m in models:
        m.calls += 1
    logits_p, h_t = outs[0][0][:, -1], outs[0][1]
    if record is not None:
        prompt = None
        if step == 0:
            prompt, h_t = h_t, (h_t[:, -1:] if hidden else None)
            _check_head(models[0], prompt[:, -1:], logits_p)
        record(Step(step, b.rows, logits_p, prompt, models[0].head))
    return logits_p, h_t, outs[1] if len(outs) > 1 else None


def _draw(
    verifier, greedy: bool, dist, logits_p: Tensor, h_t, drafted, noise
) -> tuple[Tensor, Tensor | float | None]:
    """The step's token and w there (None without an ensemble): from p, from the verifier's bonus law
    given p alone, or from v = w·p + (1 − w)·q given the draft's (logits, hidden states) `drafted`."""
    if verifier is None:  # the target alone: argmax of the logits (as `generate`), or p
        return (logits_p.argmax(-1) if greedy else sample(dist(logits_p), noise=noise)), None
    if drafted is None:  # the engine's round without drafts: the rule's bonus law given p alone
        x = (
            verifier.greedy_bonus(logits_p, None, None)
            if greedy
            else sample(verifier.bonus(dist(logits_p), None, None), noise=noise)
        )
        return x, None
    logits_q, h_d = drafted  # from v = w·p + (1 − w)·q
    p, q = dist(logits_p), dist(logits_q[:, -1])
    w = verifier.weights(p.unsqueeze(1), q.unsqueeze(1), h_d, h_t)
    w = w.squeeze(1) if isinstance(w, Tensor) else w
    x = verifier.greedy_bonus(p, q, w) if greedy else sample(verifier.bonus(p, q, w), noise=noise)
    return x, w


def _emit(b: _Batch, counter: RowCounter, host, x: Tensor, w, eos: Tensor, step: int, max_new: int) -> list:
    """The step's one host sync (finished rows, and the new token for `stop`), then the token written
    to the output where kept and the step counted. Returns which rows are done."""
    n = x.shape[0]
    keep = torch.ones_like(x)
    done = torch.isin(x, eos) | (step + 1 == max_new)
    table = torch.stack([done.long(), x], 1).cpu().numpy()
    done_h, keep_h = table[:, 0].tolist(), [1] * n
    if host is not None and host.stop_rows(table[:, 1:], keep_h, done_h):
        keep = torch.tensor(keep_h, dtype=torch.long, device=x.device)
    w_x = (
        None
        if not counter.records_w
        else (w if isinstance(w, Tensor) else torch.full((n,), float(w), device=x.device))
    )
    cols = torch.where(keep > 0, step, max_new)
    b.out[b.rows, cols] = x
    kept = keep.unsqueeze(1) > 0
    counter.count(
        b.rows,
        Round.single(x, w_x, zeros=b.none[:n], ones=b.full[:n], keep=keep, kept=kept, cols=cols[:, None]),
    )
    return done_h


def _leave(b: _Batch, done_h: list, host, models: list[SlotModel]) -> bool:
    """Finished rows leave the batch (slots, host stop check, caches); False where none stays."""
    stay = [i for i, d in enumerate(done_h) if not d]
    if not stay:
        return False
    idx = torch.tensor(stay, dtype=torch.long, device=b.rows.device)
    b.rows, b.ids, b.mask, b.pos = b.rows[idx], b.ids[idx], b.mask[idx], b.pos[idx]
    if host is not None:
        host.select(stay)
    for m in models:
        m.select(idx)
    return True


def _check_head(model: SlotModel, hidden: Tensor, logits: Tensor) -> None:
    """`record`'s head must give the forward's logits: a model whose causal-LM forward does more to
    its logits than `SlotModel.head` knows (a logit scale) would hand over wrong prompt laws."""
    again = model.head(hidden)[:, -1]
    scale = max(1.0, float(logits.nan_to_num(0, 0, 0).abs().max()))
    gap = float(torch.where(again == logits, 0.0, again - logits).abs().max())
    if not gap <= 1e-3 * scale:  # the same product on the same states: rounding at most
        raise ValueError(
            f"record: the target's LM head on its final hidden states differs from its logits by "
            f"{gap:.3g} (scale {scale:.3g}); its forward does more than the head (SlotModel.head)"
        )
