"""Batched speculative decoding: the draft proposes, the target verifies, a `Verifier` decides.

One round, per row: the draft proposes x_1..x_n ~ q; the target scores [t0, x_1..x_n] in one
forward (t0 = the last emitted token), giving p_1..p_{n+1}; the verifier's accept test keeps the
longest accepted prefix x_1..x_k; the token after it is drawn from the verifier's rejection
distribution (k < n) or its bonus distribution (k = n). For the ensemble verifiers that is:
accept x_i with probability min(1, 1 − w_i + w_i·p_i(x_i)/q_i(x_i)), at a rejection draw from
normalize(max(0, p − q)), and the bonus from v_{n+1} ("ensemble", so every emitted token is
exactly v-distributed) or p_{n+1} ("target", as transformers does). The rules are `verify.py`'s; a
round without drafts (n = 0) emits from the bonus law too (typical acceptance: typical(p), not p).
The first new token comes from the first round like any other (verified against v, as transformers
5.x's assisted generation does), or with `first_token="target"` from one target forward over the
prompt alone (argmax p_1, or x ~ p_1: a round without drafts), before the first draft.

Steps. `speculative_generate` checks its options (`_Options`), sets up the slots and both models
(`_start`) and runs rounds (`_decode`); a round (`_round`) reads as the algorithm: `_draft` (x ~ q),
`_score` (p), `_verify` (w, k, full), `_next_token` (rejection or bonus, and a bonus coin),
`_draft_bonus` (a bonus that needs q_{n+1}), then the host sync (`_sync`) and the emission (`_emit`);
they pass one `rounds.Round` (n, lengths, x, q, p, w, k, full, nxt, w_next, needs_q, then keep,
kept, cols), each returning it with its own fields set, and the finished round goes to
`stats.RowCounter.count`.

Layout. Both models' KV caches share one slot layout (`Slots`): slot s holds the token
`ids[:, s]` at position `pos[:, s]`, and `mask[:, s]` says whether it is part of the row's text.
Rows accept different numbers of tokens, so after a round each cache is cropped to the longest
accepted prefix in the batch and the rejected slots of shorter rows stay behind as masked holes:
nothing is re-encoded and no row waits for another. Finished rows leave the batch. Each model
reads the prompt in its first call (no separate prefill, except the target's with
`first_token="target"`). How a model is called (and its cache kept) is `forward.py`'s business.

Host syncs: one per round (the accepted lengths, finished rows and the next budget come to the
host together), a second only when a bonus needs the draft (an ensemble bonus; with a constant w,
`Verifier.bonus_coin`, only where a coin tossed first chose q: v = w·p + (1 − w)·q is the bonus
from p with probability w, from q otherwise), and one for the target's first token with
`first_token="target"`. On a CPU a round's drafting also ends once every row has drafted EOS (the
drafts after it would be cut), which reads a flag per draft step; on a GPU it does not (that would
stall the queue of kernels).
Either way the statistics count a row's proposals only up to its first drafted EOS (`stats.py`).

The engine knows nothing about tokenizers, tasks or training; statistics are `stats.py`'s and
stopping at a stop sequence is `stopping.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

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
from diversed.decoding.slots import Slots
from diversed.decoding.stats import RowCounter, SpeculativeStats, first_true
from diversed.decoding.stopping import HostStopCheck
from diversed.decoding.verify import Lossless, Verifier, probs_from_logits, sample

__all__ = ["SpeculativeOutput", "SpeculativeStats", "most_drafts", "speculative_generate"]


class SpeculativeOutput(NamedTuple):
    sequences: Tensor  # [B, P + max new]: input ids then new tokens, padded with pad_token_id
    stats: SpeculativeStats

    @classmethod
    def of(cls, input_ids: Tensor, out: Tensor, stats: SpeculativeStats, t_start: float) -> SpeculativeOutput:
        """A decoding loop's result: the prompts then each row's new tokens from `out` (up to the
        longest row), as ordinary tensors, with the wall time since `t_start` once the device's
        queued work is done."""
        sequences = torch.cat([input_ids, out[:, : int(stats.new_tokens.max())]], 1)
        with torch.inference_mode(False):  # ordinary tensors (inference tensors refuse autograd)
            sequences = sequences.clone()
        stats.ordinary()
        if input_ids.device.type == "cuda":
            torch.cuda.synchronize(input_ids.device)
        stats.wall_time_s = time.perf_counter() - t_start
        return cls(sequences, stats)


# ----------------------------------------------------------------------------- inputs


def most_drafts(max_new_tokens: int, first_token: str = "ensemble") -> int:
    """The most drafts a round proposes within `max_new_tokens`, whatever `num_draft_tokens` asks
    (the loop's cap: with r new tokens left, r − 1 drafts and the token after them; with
    `first_token="target"` the first token comes before any round, so one fewer). A larger N runs
    as this one (`preflight.check_draft_lengths` refuses it in a sweep)."""
    return max(0, int(max_new_tokens) - 1 - (first_token == "target"))


@dataclass(frozen=True)
class _Options:
    """`speculative_generate`'s decoding options as given; `check` refuses bad ones before any forward."""

    num_draft_tokens: int
    max_new_tokens: int
    do_sample: bool
    temperature: float
    bonus_token: str
    eos_token_id: int | list[int] | None
    pad_token_id: int | None
    schedule: str  # num_draft_tokens_schedule
    threshold: float | None  # draft_confidence_threshold
    stop: Callable[[list[int], int], int | None] | None
    first_token: str
    top_k: int | None
    top_p: float

    def check(self, target, draft, input_ids, attention_mask, verifier) -> None:
        """A ValueError naming the option and what it takes, for the first bad one."""
        n, threshold, stop = self.num_draft_tokens, self.threshold, self.stop
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_draft_tokens must be an integer >= 1, got {n!r}")
        check_decoding(self.max_new_tokens, self.temperature, self.top_k, self.top_p)
        if self.bonus_token not in ("ensemble", "target"):
            raise ValueError(f"bonus_token must be 'ensemble' or 'target', got {self.bonus_token!r}")
        if self.first_token not in ("ensemble", "target"):
            raise ValueError(f"first_token must be 'ensemble' or 'target', got {self.first_token!r}")
        if self.schedule not in ("constant", "heuristic"):
            raise ValueError(
                f"num_draft_tokens_schedule must be 'constant' or 'heuristic', got {self.schedule!r}"
            )
        if threshold is not None and not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"draft_confidence_threshold must be in [0, 1] or None, got {threshold!r}")
        if not isinstance(verifier, Verifier):
            raise ValueError(
                f"verifier must be a Verifier (Lossless(), StaticEnsemble(w), DynamicEnsemble(head), ...), "
                f"got {type(verifier).__name__}"
            )
        if stop is not None and not callable(stop):
            raise ValueError(
                f"stop must be a callable (new tokens -> tokens to keep or None), got {type(stop).__name__}"
            )
        dt, dd = device_of(target), device_of(draft)
        if dt != dd:
            raise ValueError(f"target is on {dt} and draft on {dd}: put both models on the same device")
        check_prompts(input_ids, attention_mask, dt)
        verifier.check_pair(target, draft)


# ----------------------------------------------------------------------------- the loop's state


@dataclass(frozen=True)
class _Mode:
    """Everything decided once, before the loop."""

    greedy: bool  # argmax everywhere; compared at T = 1 as transformers does
    tau: float  # the temperature of p and q
    top_k: int  # the truncation of p and q alike when sampling (0 and 1.0: none; greedy: none)
    top_p: float
    probs: bool  # p and q as probabilities (else logits: greedy lossless only compares argmaxes)
    draft_bonus: bool  # a fully accepted round's bonus needs q after the last draft
    # sampling, with a bonus that needs q: the share of it drawn from p by a coin first (only rows the
    # coin sends to q need the draft's call); None: every full row needs q
    bonus_coin: float | None
    eos: Tensor
    threshold: float | None  # a row stops proposing once the draft's top probability falls below it
    drafts_end_at_eos: bool  # CPU: a round's drafting ends once every row has drafted EOS
    heuristic: bool  # the draft length grows by 2 after a fully accepted round, else shrinks by 1

    @classmethod
    def of(cls, o: _Options, verifier: Verifier, eos: Tensor, device: torch.device) -> _Mode:
        """The mode of a call with options `o` (checked) and `verifier`, EOS ids `eos` on `device`."""
        greedy = not o.do_sample or float(o.temperature) == 0.0
        draft_bonus = verifier.bonus_needs_draft(o.bonus_token)
        return cls(
            greedy=greedy,
            tau=1.0 if greedy else float(o.temperature),
            top_k=0 if greedy else int(o.top_k or 0),
            top_p=1.0 if greedy else float(o.top_p),
            probs=verifier.probs_needed(greedy),
            draft_bonus=draft_bonus,
            bonus_coin=verifier.bonus_coin() if draft_bonus and not greedy else None,
            eos=eos,
            threshold=o.threshold,
            drafts_end_at_eos=device.type == "cpu" and eos.numel() > 0,
            heuristic=o.schedule == "heuristic",
        )

    def dist(self, logits: Tensor) -> Tensor:
        """p or q: softmax(truncate(logits / T)), or the logits where no probabilities are needed."""
        return probs_from_logits(logits, self.tau, self.top_k, self.top_p) if self.probs else logits


# ----------------------------------------------------------------------------- the steps of a round


def _draft(D: SlotModel, s: Slots, n: int, mode: _Mode, generator) -> Round:
    """x_1..x_n ~ q, one forward each (the first also catches up on slots the draft has not read:
    the prompt, or x_n of a fully accepted round), written into the slots. Drafting may end early
    (fewer than n: every row stopped proposing, or on a CPU every row drafted EOS)."""
    b, cur = s.rows.shape[0], s.cur
    q_steps, h_steps = [], []
    lengths: Tensor | int = n
    if mode.threshold is not None:
        lengths = torch.full((b,), n, dtype=torch.long, device=s.ids.device)
        proposing = torch.ones(b, dtype=torch.bool, device=s.ids.device)
    if mode.drafts_end_at_eos:
        drafted_eos = torch.zeros(b, dtype=torch.bool, device=s.ids.device)
    for j in range(n):
        logits_q, h_d = D.forward(s.ids, s.mask, s.pos, cur + j + 1, keep=1)
        D.calls += 1
        logits_q = logits_q[:, 0]
        q_j = mode.dist(logits_q)
        s.ids[:, cur + j + 1] = logits_q.argmax(-1) if mode.greedy else sample(q_j, generator)
        q_steps.append(q_j)
        if h_d is not None:
            h_steps.append(h_d[:, 0])
        if mode.threshold is not None:
            # A row stops proposing once the draft's top probability falls below the threshold;
            # the low-confidence token itself is still proposed, as in transformers.
            top = torch.softmax(logits_q, -1).max(-1).values
            unsure = proposing & (top < mode.threshold)
            lengths = torch.where(unsure, j + 1, lengths)
            proposing &= ~unsure
        if mode.drafts_end_at_eos:
            drafted_eos |= torch.isin(s.ids[:, cur + j + 1], mode.eos)
        # Drafting ends early when no row proposes any more, or once every row has drafted EOS.
        if j + 1 < n and (
            (mode.threshold is not None and not bool(proposing.any()))
            or (mode.drafts_end_at_eos and bool(drafted_eos.all()))
        ):
            n, lengths = j + 1, lengths.clamp_max(j + 1) if isinstance(lengths, Tensor) else j + 1
            break
    stack = lambda steps: torch.stack(steps, 1) if steps else None  # noqa: E731
    return Round(
        n=n, lengths=lengths, x=s.ids[:, cur + 1 : cur + n + 1], q=stack(q_steps), h_q=stack(h_steps)
    )


def _score(T: SlotModel, s: Slots, r: Round, mode: _Mode) -> Round:
    """p_1..p_{n+1}: one target forward over [t0, x_1..x_n]."""
    logits_p, h_p = T.forward(s.ids, s.mask, s.pos, s.cur + r.n + 1, keep=r.n + 1)
    T.calls += 1
    return r._replace(logits_p=logits_p, p=mode.dist(logits_p), h_p=h_p)


def _verify(verifier: Verifier, mode: _Mode, r: Round, steps: Tensor, generator) -> Round:
    """w, the verifier's per-position parameter at the drafts; k, the longest accepted prefix per
    row (ensembles: x_i accepted with probability min(1, 1 − w_i + w_i·p_i(x_i)/q_i(x_i)), greedy
    while x_i == argmax v_i); and whether every proposal was accepted (`full`)."""
    n = r.n
    if n == 0:
        k = torch.zeros(r.x.shape[0], dtype=torch.long, device=r.x.device)
        return r._replace(k=k, full=k == r.lengths)
    p = r.p[:, :n]
    w = verifier.weights(p, r.q, r.h_q, r.h_p[:, :n] if r.h_p is not None else None)
    if mode.greedy:
        ok = verifier.greedy_accept(p, r.q, r.x, w)
    else:
        ok = verifier.accept(p, r.q, r.x, w, generator)
    if isinstance(r.lengths, Tensor):
        ok &= steps[:n] < r.lengths.unsqueeze(1)  # nothing proposed past a row's length
    k = ok.long().cumprod(-1).sum(-1)
    return r._replace(w=w, k=k, full=k == r.lengths)


def _next_token(verifier: Verifier, mode: _Mode, r: Round, generator) -> Round:
    """The token after the accepted prefix: from the rejection law at k < n (ensembles:
    normalize(max(0, p − q)) at the rejected position), else (a full round, or no drafts) from
    `bonus(p, None, None)` (`_draft_bonus` redraws a bonus that needs q); and w there. With a bonus
    coin (`Verifier.bonus_coin`: bonus law a·p + (1 − a)·q) it is tossed here for the full rows,
    `needs_q` where it chose q (u >= a, u ~ U[0, 1) in float64, as `sample` draws)."""
    n, k, full = r.n, r.k, r.full
    kk = k.clamp_max(n - 1)  # the rejected position (rows that took every draft: ignored)
    at = lambda t: _at(t, kk)  # noqa: E731
    w_k = at(r.w) if isinstance(r.w, Tensor) else r.w
    if mode.greedy:
        nxt = verifier.greedy_bonus(_at(r.logits_p, k), None, None)
        if n > 0:
            nxt = torch.where(full, nxt, verifier.greedy_rejection(at(r.p), at(r.q), w_k))
    else:
        p_k = _at(r.p, k)
        law = verifier.bonus(p_k, None, None)  # p for most rules; typical acceptance: typical(p)
        if n > 0:
            law = torch.where(full.unsqueeze(-1), law, verifier.rejection(p_k, at(r.q), w_k))
        nxt = sample(law, generator)
    needs_q = None
    if mode.bonus_coin is not None:  # bonus ~ a·p + (1 − a)·q: from p (drawn above) unless u >= a
        u = torch.rand(k.shape, dtype=torch.float64, device=k.device, generator=generator)
        needs_q = r.full & (u >= mode.bonus_coin)
    w_next = None
    if verifier.records_w:  # w at the emitted token after the prefix (1 for a bonus from p; a coin's w)
        at_bonus = 1.0 if mode.bonus_coin is None else mode.bonus_coin
        w_next = torch.where(full, at_bonus, w_k) if n > 0 else torch.full(k.shape, at_bonus, device=k.device)
    return r._replace(nxt=nxt, w_next=w_next, needs_q=needs_q)


def _draft_bonus(verifier: Verifier, mode: _Mode, D: SlotModel, s: Slots, r: Round, generator) -> Round:
    """The bonus of fully accepted rows from `verifier.bonus(p_L, q_L, w_L)` at L = the row's
    drafts + 1 (ensembles: v_L = w_L·p_L + (1 − w_L)·q_L), or with a coin (`r.needs_q`) from q_L
    where the coin chose q (the others keep their draw from p). A row that stopped proposing early
    already has q_L; otherwise the draft reads x_n now (it needs it next round anyway)."""
    n, full = r.n, r.full
    logits_e, h_e = D.forward(s.ids, s.mask, s.pos, s.cur + n + 1, keep=1)
    D.calls += 1
    q_e = mode.dist(logits_e[:, 0])
    h_L = None if h_e is None else r.h_p[:, n:]  # hidden states at L (a verifier with a head)
    p_L, q_L = r.p[:, n], q_e
    if isinstance(r.lengths, Tensor):  # rows that stopped early: position lengths + 1
        then = lambda drafts, e: e if drafts is None else torch.cat([drafts, e], 1)  # noqa: E731
        p_L, q_L = _at(r.p, r.lengths), _at(then(r.q, q_e.unsqueeze(1)), r.lengths)
        if h_e is not None:
            h_e = _at(then(r.h_q, h_e), r.lengths).unsqueeze(1)
            h_L = _at(r.h_p, r.lengths).unsqueeze(1)
    w_L = verifier.weights(p_L.unsqueeze(1), q_L.unsqueeze(1), h_e, h_L)
    w_L = w_L.squeeze(1) if isinstance(w_L, Tensor) else w_L
    if mode.greedy:
        bonus = verifier.greedy_bonus(p_L, q_L, w_L)
    elif r.needs_q is not None:  # the coin's rows: the q part of a·p + (1 − a)·q
        bonus, full = sample(q_L, generator), r.needs_q
    else:
        bonus = sample(verifier.bonus(p_L, q_L, w_L), generator)
    w_next = None if r.w_next is None else torch.where(full, w_L, r.w_next)
    return r._replace(nxt=torch.where(full, bonus, r.nxt), w_next=w_next)


# ----------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class _Loop:
    """What every round of one call reads and updates: both models on the shared slots, the rule,
    the mode, the statistics, the host stop check (None: no `stop`) and the length budget."""

    T: SlotModel
    D: SlotModel
    s: Slots
    verifier: Verifier
    mode: _Mode
    counter: RowCounter
    host: HostStopCheck | None
    max_new: int
    generator: torch.Generator | None


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
    first_token: str = "ensemble",
    top_k: int | None = 0,
    top_p: float = 1.0,
    prompt_cache: PromptCache | None = None,
) -> SpeculativeOutput:
    """Generate up to `max_new_tokens` per row with the draft proposing and the target verifying.

    `verifier=None` is lossless. Greedy (`do_sample=False` or temperature 0) accepts x_i while
    the verifier's greedy test holds (ensembles: x_i == argmax v_i), emits its greedy choice at
    the first mismatch, and compares softmax at T = 1 as transformers does. Prompts must be
    left-padded. Returns `(sequences, stats)`.

    `top_k`, `top_p` (sampling; 0 or None, 1.0: none) truncate p and q alike after the temperature
    with transformers' warpers (`verify.truncate`), as `generate` does; every verifier sees them.

    `stop(new_tokens, n)`, if given, is called on the host after every round with each row's new
    tokens so far (the last `n` of them from this round) and returns None to go on, or how many of
    them to keep (a stop string reached, see `Task.stopper`); the row then ends there like at EOS.
    Its tokens come to the host with the round's one sync. If `stop.triggers` is a bool mask over
    token ids (True for the tokens that can complete a stop; ids past its end count as True), only
    rows that kept such a token this round are asked.

    `first_token`: "ensemble" (the default) drafts from the prompt at once and verifies the first
    new token against v like every other (what transformers 5.x's assisted generation does, so
    static greedy with `bonus_token="target"` equals its `assistant_ensemble_weight`); "target"
    first runs the target alone over the prompt and emits argmax p_1 (greedy) or x ~ p_1 (typical
    acceptance: typical(p_1)), as engines whose prefill emits the first token do. It is a round:
    one target call, no drafts proposed or accepted, w = 1 where w is recorded; rows that end on it
    (EOS, `max_new_tokens=1`, `stop`) leave before any draft is made.

    `prompt_cache`: both models read each prompt but its last token in a call of their
    own, copied from the cache where that model already read this batch (a sweep's later points)
    and kept there otherwise; outputs are the same for a hit and a miss (`prompt_cache.py`). None
    (the default): the first round reads the prompt with its tokens in one call per model.
    """
    verifier = Lossless() if verifier is None else verifier
    o = _Options(
        num_draft_tokens=num_draft_tokens,
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=temperature,
        bonus_token=bonus_token,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        schedule=num_draft_tokens_schedule,
        threshold=draft_confidence_threshold,
        stop=stop,
        first_token=first_token,
        top_k=top_k,
        top_p=top_p,
    )
    o.check(target, draft, input_ids, attention_mask, verifier)
    vocab = shared_vocab_size(target, draft)
    t_start = time.perf_counter()
    loop = _start(target, draft, input_ids, attention_mask, verifier, vocab, o, generator, prompt_cache)
    _decode(loop, o)
    stats = loop.counter.finish(target=loop.T, draft=loop.D, verifier=verifier.kind)
    return SpeculativeOutput.of(input_ids, loop.s.out, stats, t_start)


def _start(target, draft, input_ids, attention_mask, verifier, vocab, o: _Options, generator, prompt_cache):
    """Everything decided once (`_Mode`) and the state the rounds share: the slots (the prompt but
    its last token read from `prompt_cache` where given), the statistics, the host stop check, both
    models on the slot layout."""
    device = input_ids.device
    eos_ids, pad = special_tokens(target, o.eos_token_id, o.pad_token_id)
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
    mode = _Mode.of(o, verifier, eos, device)
    B, n, max_new = input_ids.shape[0], o.num_draft_tokens, o.max_new_tokens
    mask0 = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    s = Slots(input_ids, mask0, pad, max_new, n)
    counter = RowCounter(B, n, device, verifier.records_w, max_new, measures_tv=not mode.greedy, eos=eos)
    host = HostStopCheck(B, max_new, o.stop, vocab) if o.stop is not None else None
    T, D = SlotModel(target, vocab, verifier.needs_hidden), SlotModel(draft, vocab, verifier.needs_hidden)
    if prompt_cache is not None and s.cur > 0:  # slots [0, cur): the prompt but t0, its last token
        T.prefill(s.ids, s.mask, s.pos, s.cur, prompt_cache)
        D.prefill(s.ids, s.mask, s.pos, s.cur, prompt_cache)
    return _Loop(T, D, s, verifier, mode, counter, host, max_new, generator)


def _decode(loop: _Loop, o: _Options) -> None:
    """Rounds until every row has left the batch (with `first_token="target"`, the first token from
    the target alone before them), the draft length set by the schedule."""
    n_cap = o.num_draft_tokens
    fewest = 0  # host: fewest tokens emitted by a row still in the batch
    if o.first_token == "target":  # the first new token from the target's prefill alone, then rounds
        fewest, done_h = _first_from_target(loop)
        _leave(loop, done_h)
    while loop.s.rows.shape[0]:
        # Never draft past the budget: with r tokens left, r − 1 drafts and the token after them.
        n, full_h, done_h, fewest = _round(loop, min(n_cap, o.max_new_tokens - fewest - 1))
        if loop.mode.heuristic:  # +2 after a round where every row took all drafts
            n_cap = n_cap + 2 if all(full_h) and n == n_cap else max(1, n_cap - 1)
        _leave(loop, done_h)


def _round(loop: _Loop, n: int) -> tuple[int, list, list, int]:
    """One round of up to `n` drafts: the steps, the round's host sync, then the emission and the
    caches on the device. Returns (drafts proposed, whether each row took them all, whether each
    row is done, the fewest tokens a row still in the batch has emitted)."""
    s, mode, verifier, generator = loop.s, loop.mode, loop.verifier, loop.generator
    s.open_round(n)
    r = _draft(loop.D, s, n, mode, generator)  # x_1..x_n ~ q (n: as many as drafted)
    n, steps = r.n, s.ramp(r.n)
    r = _score(loop.T, s, r, mode)  # p_1..p_{n+1}
    r = _verify(verifier, mode, r, steps, generator)  # w, and k accepted drafts per row
    r = _next_token(verifier, mode, r, generator)  # the token after them (rejection or bonus)

    # --- the round's host sync (a second one only when a bonus needs the draft): the longest
    # accepted prefix, whether a bonus is due, finished rows, and the next budget
    n_new = loop.counter.new_tokens(s.rows)
    remaining = loop.max_new - n_new  # [b], all >= 1
    emitted, keep, done = _emitted(r, mode.eos, remaining)
    due = r.full & (keep > r.k)  # a bonus is kept only where no EOS came before it and budget is left
    if r.needs_q is not None:  # with a coin, only the bonuses it drew from q need the draft
        due = due & r.needs_q
    (k_h, full_h, due_h, done_h, keep_h, fewest), tokens_h = _sync(
        [r.k, r.full.long(), due.long()],
        done,
        keep,
        n_new,
        loop.max_new,
        emitted if loop.host is not None else None,
    )
    if mode.draft_bonus and any(due_h):
        r = _draft_bonus(verifier, mode, loop.D, s, r, generator)
        emitted, keep, done = _emitted(r, mode.eos, remaining)
        (done_h, keep_h, fewest), tokens_h = _sync(
            [], done, keep, n_new, loop.max_new, emitted if loop.host is not None else None
        )

    # --- bookkeeping on the device: output, statistics, slot mask, caches
    r = _emit(loop, r, emitted, _stopped(loop, keep, tokens_h, keep_h, done_h), n_new, steps)
    new_cur = s.commit(r.k, max(k_h), r.nxt, n, steps)
    loop.T.crop(new_cur)
    loop.D.crop(new_cur)
    return n, full_h, done_h, fewest


# ----------------------------------------------------------------------------- helpers


def _first_from_target(loop: _Loop) -> tuple[int, list]:
    """first_token="target": one target forward over the prompt gives p_1; the first token is argmax
    p_1 (greedy) or x ~ bonus(p_1, None, None), a round without drafts (w = 1 where w is recorded),
    with its own host sync. Returns (the fewest tokens a row still in the batch has, the rows done);
    the draft reads the prompt and this token in the next round."""
    T, s, mode, verifier = loop.T, loop.s, loop.mode, loop.verifier
    logits, _ = T.forward(s.ids, s.mask, s.pos, s.cur + 1, keep=1)
    T.calls += 1
    logits = logits[:, 0]
    nxt = (
        logits.argmax(-1)
        if mode.greedy
        else sample(verifier.bonus(mode.dist(logits), None, None), loop.generator)
    )
    r = Round.single(nxt, torch.ones(nxt.shape[0], device=nxt.device) if verifier.records_w else None)
    n_new, steps = loop.counter.new_tokens(s.rows), s.ramp(0)
    emitted, keep, done = _emitted(r, mode.eos, loop.max_new - n_new)
    (done_h, keep_h, fewest), tokens_h = _sync(
        [], done, keep, n_new, loop.max_new, emitted if loop.host is not None else None
    )
    r = _emit(loop, r, emitted, _stopped(loop, keep, tokens_h, keep_h, done_h), n_new, steps)
    s.commit(r.k, 0, nxt, 0, steps)
    return fewest, done_h


def _stopped(loop: _Loop, keep: Tensor, tokens_h, keep_h: list, done_h: list) -> Tensor:
    """`keep` once the host stop check has read the round's tokens: a row whose text reached a stop
    sequence keeps the tokens up to it and is done (`keep_h`, `done_h` updated in place)."""
    if loop.host is not None and loop.host.stop_rows(tokens_h, keep_h, done_h):
        return torch.tensor(keep_h, dtype=torch.long, device=keep.device)
    return keep


def _emit(loop: _Loop, r: Round, emitted: Tensor, keep: Tensor, n_new: Tensor, steps: Tensor) -> Round:
    """The round's first `keep` tokens of `emitted` written to the output, and the round counted."""
    kept = steps < keep.unsqueeze(1)
    r = r._replace(keep=keep, kept=kept, cols=loop.s.emit(emitted, kept, n_new, steps))
    loop.counter.count(loop.s.rows, r)
    return r


def _leave(loop: _Loop, done_h: list) -> None:
    """Finished rows leave the batch (slots, host stop check, both caches)."""
    s = loop.s
    if any(done_h):
        stay = [i for i, done_i in enumerate(done_h) if not done_i]
        idx = torch.tensor(stay, dtype=torch.long, device=s.ids.device)
        s.select(idx)
        if loop.host is not None:
            loop.host.select(stay)
        if s.rows.shape[0]:
            loop.T.select(idx)
            loop.D.select(idx)


def _at(t: Tensor, index: Tensor) -> Tensor:
    """t[b, index[b]] for t of shape [B, T, ...]."""
    shape = (t.shape[0], 1) + (1,) * (t.dim() - 2)
    return t.gather(1, index.view(shape).expand(-1, 1, *t.shape[2:])).squeeze(1)


def _sync(
    columns: list[Tensor], done: Tensor, keep: Tensor, n_new: Tensor, max_new: int, tokens: Tensor | None
):
    """One host sync: per-row [b] `columns`, then done, keep and the fewest tokens emitted by a row
    still in the batch afterwards (as lists, that one as an int); and, if given, `tokens` [b, m]
    (as an array)."""
    b = done.shape[0]
    fewest = torch.where(done, max_new, n_new + keep).min()
    table = torch.stack([*columns, done.long(), keep, fewest.expand(b)], 1)
    if tokens is not None:
        table = torch.cat([table, tokens], 1)
    host = table.cpu().numpy()
    c = len(columns) + 3
    values = host[:, :c].T.tolist()
    return [*values[:-1], values[-1][0]], None if tokens is None else host[:, c:]


def _emitted(r: Round, eos: Tensor, remaining: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The round's tokens [x_1..x_k, nxt] ([b, n+1], garbage past k), how many to keep after
    cutting at the first EOS and at the length budget, and which rows are finished."""
    x, k, nxt = r.x, r.k, r.nxt
    b = x.shape[0]
    emitted = torch.cat([x, x.new_zeros(b, 1)], 1).scatter(1, k.view(b, 1), nxt.view(b, 1))
    count = k + 1
    first_eos = count + 1  # 1-based index of the first EOS; count + 1 if none
    if eos.numel():
        is_eos = torch.isin(emitted, eos) & (
            torch.arange(emitted.shape[1], device=x.device) < count.unsqueeze(1)
        )
        first_eos = first_true(is_eos, first_eos)
    keep = torch.minimum(torch.minimum(count, first_eos), remaining)
    done = (first_eos <= keep) | (keep >= remaining)
    return emitted, keep, done
