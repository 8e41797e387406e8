"""Token-by-token decoding on the engine's own forward path: the fair baseline for speculation.

`autoregressive_generate(target, input_ids, ...)` decodes with the target alone, one token per
step, through the same `SlotModel` calls, KV caches, stopping (EOS, length budget, a task's
`stop` callback through `HostStopCheck`) and batch handling (finished rows leave the batch) as
`speculative_generate`, and returns the same `(sequences, stats)`. So a speedup measured against
it comes from speculation, not from a different forward path (transformers' `generate` is a
separate reference). Greedy takes argmax of the logits, as `generate` does.

With a draft and an ensemble verifier it samples each token from v = w·p + (1 − w)·q (the
verifier's bonus distribution given both models), one target and one draft forward per token:
what a training rollout from v costs without speculation. Sampled p and q are the engine's:
softmax(logits / T), truncated alike if asked (`top_k`, `top_p`).

Statistics: every step is a round without drafts that emits one token (`rounds.Round.single`,
counted by the engine's `stats.RowCounter`: rounds = tokens per row, acceptance undefined, tokens
per target call 1). It does not time anything beyond `wall_time_s`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
from diversed.decoding.rounds import Round
from diversed.decoding.stats import RowCounter
from diversed.decoding.stopping import HostStopCheck
from diversed.decoding.verify import Ensemble, Verifier, probs_from_logits, sample


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
) -> SpeculativeOutput:
    """Generate up to `max_new_tokens` per row, one target forward (and, with `draft` and
    `verifier`, one draft forward) per token. Prompts must be left-padded; `stop`, `top_k` and
    `top_p` are as in `speculative_generate` (p and q truncated alike when sampling). Returns
    `(sequences, stats)`."""
    check_decoding(max_new_tokens, temperature, top_k, top_p)
    check_prompts(input_ids, attention_mask, device_of(target))
    if (draft is None) != (verifier is None):
        raise ValueError("give both draft and verifier (sampling from v) or neither (the target alone)")
    if verifier is not None and not isinstance(verifier, Ensemble):
        raise ValueError(
            f"sampling from v needs an ensemble verifier (v = w·p + (1 − w)·q), got {type(verifier).__name__}"
        )
    if stop is not None and not callable(stop):
        raise ValueError(
            f"stop must be a callable (new tokens -> tokens to keep or None), got {type(stop).__name__}"
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
    attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    # Slots: the prompt, then one per new token (no holes: nothing is rejected).
    ids = torch.cat([input_ids, input_ids.new_full((B, max_new_tokens), pad)], 1)
    mask = torch.cat([attention_mask.long(), attention_mask.new_ones(B, max_new_tokens).long()], 1)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    out = torch.full((B, max_new_tokens + 1), pad, dtype=torch.long, device=device)  # last col: sink
    rows = torch.arange(B, device=device)
    counter = RowCounter(B, 0, device, verifier is not None and verifier.records_w, max_new_tokens)
    none, full = rows.new_zeros(B), rows.new_ones(B, dtype=torch.bool)  # each step's k and full (no drafts)
    host = HostStopCheck(B, max_new_tokens, stop, vocab) if stop is not None else None

    for step in range(max_new_tokens):
        b = rows.shape[0]
        outs = [m.forward(ids, mask, pos, P + step, keep=1) for m in models]
        for m in models:
            m.calls += 1
        logits_p, h_t = outs[0][0][:, -1], outs[0][1]
        # noise for every row of the batch as it started, rows that left included: a row's draws do
        # not depend on when the others end
        noise = (
            None
            if greedy
            else torch.empty(B, vocab, device=device).exponential_(1.0, generator=generator)[rows]
        )
        w = None
        if verifier is None:  # the target alone: argmax of the logits (as `generate`), or p
            x = logits_p.argmax(-1) if greedy else sample(dist(logits_p), noise=noise)
        else:  # from v = w·p + (1 − w)·q
            (logits_q, h_d) = outs[1]
            p, q = dist(logits_p), dist(logits_q[:, -1])
            w = verifier.weights(p.unsqueeze(1), q.unsqueeze(1), h_d, h_t)
            w = w.squeeze(1) if isinstance(w, Tensor) else w
            x = verifier.greedy_bonus(p, q, w) if greedy else sample(verifier.bonus(p, q, w), noise=noise)
        ids[:, P + step] = x
        keep = torch.ones_like(x)
        done = torch.isin(x, eos) | (step + 1 == max_new_tokens)
        # one host sync per step: finished rows (and the new token, for `stop`)
        table = torch.stack([done.long(), x], 1).cpu().numpy()
        done_h, keep_h = table[:, 0].tolist(), [1] * b
        if host is not None and host.stop_rows(table[:, 1:], keep_h, done_h):
            keep = torch.tensor(keep_h, dtype=torch.long, device=device)
        w_x = (
            None
            if not counter.records_w
            else (w if isinstance(w, Tensor) else torch.full((b,), float(w), device=device))
        )
        cols = torch.where(keep > 0, step, max_new_tokens)
        out[rows, cols] = x
        kept = keep.unsqueeze(1) > 0
        counter.count(
            rows,
            Round.single(x, w_x, zeros=none[:b], ones=full[:b], keep=keep, kept=kept, cols=cols[:, None]),
        )
        if any(done_h):  # finished rows leave the batch
            stay = [i for i, d in enumerate(done_h) if not d]
            if not stay:
                break
            idx = torch.tensor(stay, dtype=torch.long, device=device)
            rows, ids, mask, pos = rows[idx], ids[idx], mask[idx], pos[idx]
            if host is not None:
                host.select(stay)
            for m in models:
                m.select(idx)

    stats = counter.finish(
        target=models[0],
        draft=models[1] if draft is not None else None,
        verifier="autoregressive" if verifier is None else f"autoregressive-{verifier.kind}",
    )
    return SpeculativeOutput.of(input_ids, out, stats, t_start)
