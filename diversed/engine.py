"""Batched speculative decoding with lossless, static-ensemble and dynamic-ensemble verification.

One round, per row: the draft proposes x_1..x_n from q; the target scores [t0, x_1..x_n] in one
forward (t0 = the last emitted token); token i is accepted with probability
min(1, 1 − w_i + w_i·p_i(x_i)/q_i(x_i)); at the first rejection a token is drawn from
normalize(max(0, p − q)); if all n are accepted a bonus token is drawn from v_{n+1} ("ensemble",
so every emitted token is exactly v-distributed) or p_{n+1} ("target", as transformers does).

Layout. Both models' KV caches share one slot layout: slot s holds the token `ids[:, s]` at
position `pos[:, s]`, and `mask[:, s]` says whether it is part of the row's text. Rows accept
different numbers of tokens, so after a round each cache is cropped to the longest accepted
prefix in the batch and the rejected slots of shorter rows stay behind as masked holes: nothing
is re-encoded and no row waits for another. Finished rows leave the batch. Each model reads the
prompt in its first call of the first round (no separate prefill). How a model is called (and
its cache kept) is `forward.py`'s business.

On a CPU a round's drafting ends once every row has drafted EOS (the drafts after it would be cut);
on a GPU it does not (that would take a host sync per draft step). Either way the statistics count
a row's proposals only up to its first drafted EOS.

The engine knows nothing about tokenizers, tasks or training; the maths is in `verify.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from diversed.forward import SlotModel
from diversed.verify import (
    Lossless,
    Verifier,
    accept,
    mix,
    probs_from_logits,
    residual,
    sample,
)

# ----------------------------------------------------------------------------- statistics


@dataclass
class SpeculativeStats:
    """Acceptance statistics, per row (tensors of length B) and in total (properties)."""

    proposed: Tensor  # draft tokens proposed (up to a row's first drafted EOS in each round)
    accepted: Tensor  # draft tokens accepted by verification (before EOS / length cut-off)
    rounds: Tensor  # verification rounds = target calls the row took part in
    new_tokens: Tensor  # tokens in the output (after EOS / max_new_tokens cut-off)
    accepted_hist: Tensor  # [B, N_max+1]: rounds in which 0..N_max drafts were accepted
    w_sum: Tensor  # Σ w over the positions that emitted a token (dynamic verifier)
    w_count: Tensor
    target_calls: int = 0  # batched target forwards, prefill excluded
    draft_calls: int = 0  # batched draft forwards, prefill excluded
    wall_time_s: float = 0.0
    verifier: str = "lossless"
    num_draft_tokens: list[int] = field(default_factory=list)  # n used in each round

    @property
    def acceptance_rate(self) -> float:
        return _ratio(self.accepted.sum(), self.proposed.sum())

    @property
    def row_acceptance_rate(self) -> Tensor:
        return self.accepted / self.proposed.clamp_min(1)

    @property
    def mean_accepted_length(self) -> float:
        return _ratio(self.accepted.sum(), self.rounds.sum())

    @property
    def tokens_per_target_call(self) -> float:
        """Mean tokens emitted per verification round of a sequence (1 for plain decoding)."""
        return _ratio(self.new_tokens.sum(), self.rounds.sum())

    @property
    def tokens_per_s(self) -> float:
        return _ratio(self.new_tokens.sum(), self.wall_time_s)

    @property
    def mean_w(self) -> float | None:
        if self.verifier != "dynamic":
            return None
        return _ratio(self.w_sum.sum(), self.w_count.sum())

    @property
    def row_mean_w(self) -> Tensor | None:
        return None if self.verifier != "dynamic" else self.w_sum / self.w_count.clamp_min(1)

    def summary(self) -> dict[str, Any]:
        """Totals as plain numbers (what a results file or a log line wants)."""
        return {
            "proposed": int(self.proposed.sum()),
            "accepted": int(self.accepted.sum()),
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "accepted_length_histogram": self.accepted_hist.sum(0).tolist(),
            "rounds": int(self.rounds.sum()),
            "tokens_per_target_call": self.tokens_per_target_call,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "new_tokens": int(self.new_tokens.sum()),
            "wall_time_s": self.wall_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mean_w": self.mean_w,
        }


def _ratio(a: Any, b: Any) -> float:
    b = float(b)
    return float(a) / b if b > 0 else 0.0


class SpeculativeOutput(NamedTuple):
    sequences: Tensor  # [B, P + max new]: input ids then new tokens, padded with pad_token_id
    stats: SpeculativeStats


# ----------------------------------------------------------------------------- helpers


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def shared_vocab_size(target: nn.Module, draft: nn.Module) -> int:
    """Vocabulary compared on: the smaller one when the larger is only padded (as in Qwen pairs)."""
    vt, vd = target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0]
    small, large = min(vt, vd), max(vt, vd)
    # An embedding matrix padded for efficiency rounds the vocabulary up (to a multiple of 64 or
    # 128, or by well under 10%); anything else is a different tokenizer.
    padded = large - small < 0.1 * large or any(-(-small // m) * m == large for m in (64, 128, 256))
    if not padded:
        raise ValueError(
            f"target and draft have different vocabularies (target {vt} tokens, draft {vd}); "
            "speculative decoding needs a draft that shares the target's tokenizer"
        )
    return small


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int | Tensor):
        value = torch.as_tensor(value).flatten().tolist()
    return [int(v) for v in value]


def _check_inputs(target, draft, input_ids, attention_mask, verifier, n, max_new, temperature, bonus, schedule, threshold):
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError("input_ids must be a [batch, length] tensor with at least one token per row")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"num_draft_tokens must be an integer >= 1, got {n!r}")
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new!r}")
    if temperature is None or not float(temperature) >= 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature!r}")
    if bonus not in ("ensemble", "target"):
        raise ValueError(f"bonus_token must be 'ensemble' or 'target', got {bonus!r}")
    if schedule not in ("constant", "heuristic"):
        raise ValueError(f"num_draft_tokens_schedule must be 'constant' or 'heuristic', got {schedule!r}")
    if threshold is not None and not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"draft_confidence_threshold must be in [0, 1] or None, got {threshold!r}")
    if not isinstance(verifier, Verifier):
        raise ValueError(
            f"verifier must be Lossless(), StaticEnsemble(w) or DynamicEnsemble(head), got {type(verifier).__name__}"
        )
    dt, dd = _device(target), _device(draft)
    if dt != dd:
        raise ValueError(f"target is on {dt} and draft on {dd}: put both models on the same device")
    if input_ids.device != dt:
        raise ValueError(f"input_ids are on {input_ids.device} but the models on {dt}: move them with .to()")
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids {tuple(input_ids.shape)}")
        m = attention_mask.bool()
        if not bool(m[:, -1].all()) or bool((m[:, 1:] < m[:, :-1]).any()):
            raise ValueError("prompts must be left-padded (tokenizer.padding_side = 'left')")
    verifier.check_pair(target, draft)


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Left-pad token lists into (input_ids, attention_mask)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


# ----------------------------------------------------------------------------- the loop


def _at(t: Tensor, index: Tensor) -> Tensor:
    """t[b, index[b]] for t of shape [B, T, ...]."""
    shape = (t.shape[0], 1) + (1,) * (t.dim() - 2)
    return t.gather(1, index.view(shape).expand(-1, 1, *t.shape[2:])).squeeze(1)


@torch.inference_mode()  # cheaper than no_grad for the many tiny ops of a round
def speculative_generate(
    target: nn.Module,
    draft: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    verifier: Verifier | None = None,
    num_draft_tokens: int = 5,
    max_new_tokens: int = 128,
    do_sample: bool = False,
    temperature: float = 1.0,
    bonus_token: str = "ensemble",
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    generator: torch.Generator | None = None,
    num_draft_tokens_schedule: str = "constant",
    draft_confidence_threshold: float | None = None,
    stop: Callable[[list[int], int], int | None] | None = None,
) -> SpeculativeOutput:
    """Generate up to `max_new_tokens` per row with the draft proposing and the target verifying.

    `verifier=None` is lossless. Greedy (`do_sample=False` or temperature 0) accepts x_i while
    x_i == argmax v_i, emits argmax v_i at the first mismatch, and compares softmax at T = 1 as
    transformers does. Prompts must be left-padded. Returns `(sequences, stats)`.

    `stop(new_tokens, n)`, if given, is called on the host after every round with each row's new
    tokens so far (the last `n` of them from this round) and returns None to go on, or how many of
    them to keep (a stop string reached, see `Task.stopper`); the row then ends there like at EOS.
    Its tokens come to the host with the round's one sync. If `stop.triggers` is a bool mask over
    token ids (True for the tokens that can complete a stop; ids past its end count as True), only
    rows that kept such a token this round are asked.
    """
    verifier = Lossless() if verifier is None else verifier
    _check_inputs(
        target, draft, input_ids, attention_mask, verifier, num_draft_tokens, max_new_tokens,
        temperature, bonus_token, num_draft_tokens_schedule, draft_confidence_threshold,
    )
    if stop is not None and not callable(stop):
        raise ValueError(f"stop must be a callable (new tokens -> tokens to keep or None), got {type(stop).__name__}")
    vocab = shared_vocab_size(target, draft)
    t_start = time.perf_counter()
    device = input_ids.device
    greedy = not do_sample or float(temperature) == 0.0
    tau = 1.0 if greedy else float(temperature)
    lossless = isinstance(verifier, Lossless)
    need_q = not (greedy and lossless)  # greedy lossless only ever compares argmaxes of logits
    ensemble_bonus = bonus_token == "ensemble" and not lossless  # at w = 1, v = p: nothing to blend
    dynamic = verifier.kind == "dynamic"
    gen_config = getattr(target, "generation_config", None)
    eos_ids = _as_id_list(eos_token_id if eos_token_id is not None else getattr(gen_config, "eos_token_id", None))
    if pad_token_id is None:
        pad_token_id = getattr(gen_config, "pad_token_id", None)
        pad_token_id = pad_token_id if pad_token_id is not None else (eos_ids[0] if eos_ids else 0)
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
    # Drafting stops once every row has drafted EOS (as transformers' does at batch 1). That needs
    # the host to look after each draft step: microseconds on a CPU, but on a GPU a sync per step
    # would stall the queue of kernels, so there the drafts past EOS are made and cut.
    drafts_end_at_eos = device.type == "cpu" and eos.numel() > 0

    B, P = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    # Slot buffers (grown on demand): token id, attention mask and position of every cache slot.
    cap = P + 8 * (num_draft_tokens + 2)
    ids = torch.full((B, cap), int(pad_token_id), dtype=torch.long, device=device)
    mask = torch.zeros((B, cap), dtype=torch.long, device=device)
    pos = torch.zeros((B, cap), dtype=torch.long, device=device)
    ids[:, :P], mask[:, :P] = input_ids, attention_mask.long()
    pos[:, :P] = (mask[:, :P].cumsum(-1) - 1).clamp_min(0)
    out = torch.full((B, max_new_tokens + 1), int(pad_token_id), dtype=torch.long, device=device)  # last col: sink
    rows = torch.arange(B, device=device)  # original index of each row still in the batch
    host = _HostText(B, max_new_tokens, stop, vocab) if stop is not None else None
    # Statistics per original row stay on the device: rounds, proposed, accepted, new tokens; the
    # accepted-length histogram; Σ w and the count of positions that emitted a token.
    counts = torch.zeros(B, 4, dtype=torch.long, device=device)
    hist = torch.zeros(B, num_draft_tokens + 1, dtype=torch.long, device=device)
    w_sum = torch.zeros(B, device=device)
    w_count = torch.zeros(B, dtype=torch.long, device=device)
    ramps: dict[int, Tensor] = {}

    def ramp(n: int) -> Tensor:  # torch.arange(n + 1), made once per n
        return ramps[n] if n in ramps else ramps.setdefault(n, torch.arange(n + 1, device=device))

    rounds_n: list[int] = []

    T, D = SlotModel(target, vocab, verifier.needs_hidden), SlotModel(draft, vocab, verifier.needs_hidden)
    # No separate prefill: each model's first call of the first round reads the whole prompt.
    cur = P - 1  # slot of t0: the last emitted token, in neither cache yet
    n_cap = num_draft_tokens
    fewest = 0  # host: fewest tokens emitted by a row still in the batch

    while rows.shape[0]:
        b = rows.shape[0]
        # Never draft past the budget: with r tokens left, r − 1 drafts and the token after them.
        n = min(n_cap, max_new_tokens - fewest - 1)
        if ids.shape[1] < cur + n + 2:
            ids, mask, pos = (torch.cat([t, torch.full_like(t, f)], 1) for t, f in ((ids, pad_token_id), (mask, 0), (pos, 0)))
        steps = ramp(n)
        n_new = counts[rows, 3]
        remaining = max_new_tokens - n_new  # [b], all >= 1
        pos[:, cur + 1 : cur + n + 2] = pos[:, cur : cur + 1] + (steps + 1)
        mask[:, cur + 1 : cur + n + 1] = 1  # tentative: the target reads the drafts causally

        # --- draft: x_1..x_n ~ q, one forward each (the first also catches up on slots the draft
        # has not read: the prompt, or x_n of a fully accepted round)
        q_steps, hd_steps = [], []
        lengths: Tensor | int = n  # drafts proposed per row: n unless a row stops early
        if draft_confidence_threshold is not None:
            lengths = torch.full((b,), n, dtype=torch.long, device=device)
            proposing = torch.ones(b, dtype=torch.bool, device=device)
        if drafts_end_at_eos:
            drafted_eos = torch.zeros(b, dtype=torch.bool, device=device)
        for j in range(n):
            logits_q, h_d = D.forward(ids, mask, pos, cur + j + 1, keep=1)
            D.calls += 1
            logits_q = logits_q[:, 0]
            q_j = probs_from_logits(logits_q, tau) if need_q else logits_q
            ids[:, cur + j + 1] = logits_q.argmax(-1) if greedy else sample(q_j, generator)
            q_steps.append(q_j)
            if h_d is not None:
                hd_steps.append(h_d[:, 0])
            if draft_confidence_threshold is not None:
                # A row stops proposing once the draft's top probability falls below the threshold;
                # the low-confidence token itself is still proposed, as in transformers.
                top = torch.softmax(logits_q, -1).max(-1).values
                unsure = proposing & (top < draft_confidence_threshold)
                lengths = torch.where(unsure, j + 1, lengths)
                proposing &= ~unsure
            if drafts_end_at_eos:
                drafted_eos |= torch.isin(ids[:, cur + j + 1], eos)
            # The round's drafting ends early when no row proposes any more, or once every row has
            # drafted EOS (the drafts after it would all be cut).
            if j + 1 < n and (
                (draft_confidence_threshold is not None and not bool(proposing.any()))
                or (drafts_end_at_eos and bool(drafted_eos.all()))
            ):
                n = j + 1
                steps = ramp(n)
                lengths = lengths.clamp_max(n) if isinstance(lengths, Tensor) else n
                break

        # --- target: one forward over [t0, x_1..x_n] gives p_1..p_{n+1}
        logits_p, h_t = T.forward(ids, mask, pos, cur + n + 1, keep=n + 1)
        T.calls += 1
        p = probs_from_logits(logits_p, tau) if need_q else None
        x = ids[:, cur + 1 : cur + n + 1]
        w: Tensor | float = 1.0
        if n > 0:
            q = torch.stack(q_steps, 1)  # [b, n, V] (logits in greedy lossless)
            if not lossless:
                h_dn = torch.stack(hd_steps, 1) if hd_steps else None
                w = verifier.weights(p[:, :n], q, h_dn, h_t[:, :n] if h_t is not None else None)
            if greedy:  # accept x_i while x_i == argmax v_i
                best = logits_p[:, :n].argmax(-1) if lossless else mix(p[:, :n], q, w).argmax(-1)
                ok = x == best
            else:  # accept with probability min(1, 1 − w + w·p(x)/q(x))
                p_x = p[:, :n].gather(-1, x.unsqueeze(-1)).squeeze(-1)
                q_x = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
                ok = accept(p_x, q_x, w, torch.rand((b, n), device=device, generator=generator))
            if isinstance(lengths, Tensor):
                ok &= steps[:n] < lengths.unsqueeze(1)  # nothing proposed past a row's length
            k = ok.long().cumprod(-1).sum(-1)  # accepted drafts per row
        else:
            k = torch.zeros(b, dtype=torch.long, device=device)
        full = k == lengths  # every proposal accepted: the next token is the bonus

        # --- the token after the accepted prefix: residual at a rejection, bonus from p otherwise
        if greedy:
            nxt = _at(logits_p, k).argmax(-1)  # argmax p (bonus, and lossless mismatch)
            if not lossless and n > 0:  # ensemble mismatch: argmax v_k
                v_k = mix(_at(p, k.clamp_max(n - 1)), _at(q, k.clamp_max(n - 1)), _at(w, k.clamp_max(n - 1)))
                nxt = torch.where(full, nxt, v_k.argmax(-1))
        else:
            p_k = _at(p, k)
            if n > 0:  # normalize(max(0, v − q)) = normalize(max(0, p − q))
                p_k = torch.where(full.unsqueeze(-1), p_k, residual(p_k, _at(q, k.clamp_max(n - 1))))
            nxt = sample(p_k, generator)
        if dynamic:  # w at the position of the emitted token after the prefix (1 for a p bonus)
            w_next = torch.where(full, 1.0, _at(w, k.clamp_max(n - 1))) if n > 0 else torch.ones(b, device=device)

        # --- the round's host sync (a second one only when an ensemble bonus is drawn): the
        # longest accepted prefix, whether a bonus is due, finished rows, and the next budget
        emitted, keep, done = _emitted(x, k, nxt, eos, remaining)
        fewest_next = torch.where(done, max_new_tokens, n_new + keep).min()
        # A bonus is due only where the token after the drafts is kept (no EOS among them, budget left).
        due = full & (keep > k)
        tokens = emitted if host is not None else None  # the host's copy of the text needs them (`stop`)
        (k_h, full_h, due_h, done_h, keep_h, (fewest, *_)), tokens_h = _to_host(
            [k, full.long(), due.long(), done.long(), keep, fewest_next.expand(b)], tokens
        )
        if ensemble_bonus and any(due_h):
            # Bonus from v_{L+1} = w·p_{L+1} + (1 − w)·q_{L+1}. A row that stopped proposing early
            # already has q_{L+1}; otherwise the draft reads x_n now (it needs it next round anyway).
            logits_e, h_e = D.forward(ids, mask, pos, cur + n + 1, keep=1)
            D.calls += 1
            q_e = probs_from_logits(logits_e[:, 0], tau)
            h_L = None if h_e is None else h_t[:, n:]  # hidden states at L + 1 (dynamic verifier)
            p_L, q_L = p[:, n], q_e
            if isinstance(lengths, Tensor):  # rows that stopped early: position lengths + 1
                p_L, q_L = _at(p, lengths), _at(torch.stack(q_steps + [q_e], 1), lengths)
                if h_e is not None:
                    h_e = _at(torch.stack(hd_steps + [h_e[:, 0]], 1), lengths).unsqueeze(1)
                    h_L = _at(h_t, lengths).unsqueeze(1)
            w_b = verifier.weights(p_L.unsqueeze(1), q_L.unsqueeze(1), h_e, h_L).squeeze(1)
            v_L = mix(p_L, q_L, w_b)
            nxt = torch.where(full, v_L.argmax(-1) if greedy else sample(v_L, generator), nxt)
            if dynamic:
                w_next = torch.where(full, w_b, w_next)
            emitted, keep, done = _emitted(x, k, nxt, eos, remaining)
            fewest_next = torch.where(done, max_new_tokens, n_new + keep).min()
            (done_h, keep_h, (fewest, *_)), tokens_h = _to_host(
                [done.long(), keep, fewest_next.expand(b)], emitted if host is not None else None
            )
        if host is not None and host.stop_rows(tokens_h, keep_h, done_h):
            # a row's text reached a stop sequence: it keeps the tokens up to it and leaves
            keep = torch.tensor(keep_h, dtype=torch.long, device=device)

        # --- bookkeeping on the device: stats, output, slot mask, caches
        ones = torch.ones_like(k)
        proposed, k_stat = lengths if isinstance(lengths, Tensor) else ones * n, k
        if eos.numel() and n > 0:
            # Drafts after a row's first drafted EOS are not proposals (they are cut whatever the
            # verdict, and drafting may stop there): α counts the same on every device and batch.
            upto = _first(torch.isin(x, eos), n)
            proposed, k_stat = torch.minimum(proposed, upto), torch.minimum(k, upto)
        counts.index_add_(0, rows, torch.stack([ones, proposed, k_stat, keep], 1))
        if n + 1 > hist.shape[1]:
            hist = torch.cat([hist, hist.new_zeros(B, n + 1 - hist.shape[1])], 1)
        hist.index_put_((rows, k_stat), ones, accumulate=True)
        kept = steps < keep.unsqueeze(1)
        out[rows.unsqueeze(1), torch.where(kept, n_new.unsqueeze(1) + steps, max_new_tokens)] = emitted
        if dynamic:  # mean w over the positions that emitted a token
            w_tok = torch.cat([w if n > 0 else w_next.new_zeros(b, 0), w_next.new_zeros(b, 1)], 1)
            w_tok = w_tok.scatter(1, k.view(b, 1), w_next.view(b, 1))
            w_sum.index_add_(0, rows, (w_tok * kept).sum(1))
            w_count.index_add_(0, rows, keep)

        new_cur = cur + 1 + max(k_h)  # crop to the longest accepted prefix; shorter rows keep holes
        mask[:, cur + 1 : cur + n + 1] = steps[:n] < k.unsqueeze(1)
        ids[:, new_cur], mask[:, new_cur], pos[:, new_cur] = nxt, 1, pos[:, cur] + k + 1
        T.crop(new_cur)
        D.crop(new_cur)
        cur = new_cur
        rounds_n.append(n)
        if num_draft_tokens_schedule == "heuristic":  # +2 after a round where every row took all drafts
            n_cap = n_cap + 2 if all(full_h) and n == n_cap else max(1, n_cap - 1)

        if any(done_h):  # finished rows leave the batch
            stay = [i for i, d in enumerate(done_h) if not d]
            idx = torch.tensor(stay, dtype=torch.long, device=device)
            rows = rows[idx]
            if host is not None:
                host.select(stay)
            if rows.shape[0]:
                ids, mask, pos = ids[idx], mask[idx], pos[idx]
                T.select(idx)
                D.select(idx)

    counts, hist = counts.cpu(), hist.cpu()
    stats = SpeculativeStats(
        proposed=counts[:, 1], accepted=counts[:, 2], rounds=counts[:, 0], new_tokens=counts[:, 3],
        accepted_hist=hist, w_sum=w_sum.cpu(), w_count=w_count.cpu(), target_calls=T.calls,
        draft_calls=D.calls, verifier=verifier.kind, num_draft_tokens=rounds_n,
    )
    sequences = torch.cat([input_ids, out[:, : int(counts[:, 3].max())]], 1)
    with torch.inference_mode(False):  # hand back ordinary tensors (inference tensors refuse autograd)
        sequences = sequences.clone()
        for f in fields(stats):
            if isinstance(value := getattr(stats, f.name), Tensor):
                setattr(stats, f.name, value.clone())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    stats.wall_time_s = time.perf_counter() - t_start
    return SpeculativeOutput(sequences, stats)


def _to_host(columns: list[Tensor], tokens: Tensor | None) -> tuple[list[list[int]], np.ndarray | None]:
    """One host sync for per-row [b] columns (as lists) and, if given, more columns [b, m] (as an array)."""
    table = torch.stack(columns, 1)
    if tokens is not None:
        table = torch.cat([table, tokens], 1)
    host = table.cpu().numpy()
    c = len(columns)
    return host[:, :c].T.tolist(), None if tokens is None else host[:, c:]


def trigger_mask(stop: Callable, vocab: int) -> Tensor | None:
    """`stop.triggers` as a bool mask over `vocab` ids (None if `stop` has none); ids past the end
    of `stop.triggers` (a vocabulary padded past the tokenizer's) count as True."""
    triggers = getattr(stop, "triggers", None)
    if triggers is None:
        return None
    triggers = torch.as_tensor(triggers, dtype=torch.bool).flatten().cpu()
    mask = torch.ones(max(vocab, triggers.numel()), dtype=torch.bool)
    mask[: triggers.numel()] = triggers
    return mask


class _HostText:
    """The host's copy of each row's new tokens, for the `stop` callback, and the rows it asks.

    Every round's kept tokens (which come with the round's sync) are written in with array ops,
    no loop over the batch; `stop` is then called only for rows that kept one of `stop.triggers`
    this round, or for every row if it has none.
    """

    def __init__(self, batch: int, max_new: int, stop: Callable, vocab: int) -> None:
        self.stop = stop
        self.text = np.zeros((batch, max_new + 1), dtype=np.int64)  # last column: sink
        self.length = np.zeros(batch, dtype=np.int64)
        self.rows = np.arange(batch)  # original index of each row still in the batch
        mask = trigger_mask(stop, vocab)
        self.triggers = None if mask is None else mask.numpy()

    def stop_rows(self, tokens: np.ndarray, keep_h: list[int], done_h: list[int]) -> bool:
        """Append each row's kept tokens ([b, n+1], garbage past keep) and ask `stop` about the
        rows that kept a trigger; a row that stops keeps what `stop` says (never fewer tokens than
        before this round) and is done. Updates `keep_h` and `done_h` in place; returns whether
        any row stopped."""
        keep = np.asarray(keep_h)
        start = self.length[self.rows]
        kept = np.arange(tokens.shape[1]) < keep[:, None]
        cols = np.where(kept, start[:, None] + np.arange(tokens.shape[1]), self.text.shape[1] - 1)
        self.text[self.rows[:, None], cols] = tokens
        ask = kept if self.triggers is None else self.triggers[tokens] & kept
        stopped = False
        for i in np.flatnonzero(ask.any(1)).tolist():
            cut = self.stop(self.text[self.rows[i], : start[i] + keep_h[i]].tolist(), keep_h[i])
            if cut is not None:
                keep_h[i] = min(keep_h[i], max(0, int(cut) - int(start[i])))
                done_h[i] = stopped = True
        self.length[self.rows] = start + np.asarray(keep_h)
        return stopped

    def select(self, stay: list[int]) -> None:
        self.rows = self.rows[stay]


def _first(flags: Tensor, default: Tensor | int) -> Tensor:
    """1-based index of each row's first True in `flags` [b, m]; `default` where a row has none."""
    return torch.where(flags.any(1), flags.long().argmax(1) + 1, default)


def _emitted(x: Tensor, k: Tensor, nxt: Tensor, eos: Tensor, remaining: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """This round's tokens [x_1..x_k, nxt] ([b, n+1], garbage past k), how many to keep after
    cutting at the first EOS and at the length budget, and which rows are finished."""
    b = x.shape[0]
    emitted = torch.cat([x, x.new_zeros(b, 1)], 1).scatter(1, k.view(b, 1), nxt.view(b, 1))
    count = k + 1
    first_eos = count + 1  # 1-based index of the first EOS; count + 1 if none
    if eos.numel():
        is_eos = torch.isin(emitted, eos) & (torch.arange(emitted.shape[1], device=x.device) < count.unsqueeze(1))
        first_eos = _first(is_eos, first_eos)
    keep = torch.minimum(torch.minimum(count, first_eos), remaining)
    done = (first_eos <= keep) | (keep >= remaining)
    return emitted, keep, done
