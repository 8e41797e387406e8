"""Acceptance statistics: counted per row during decoding, summed over batches, summarised once.

- `RowCounter` counts on the device while a decoding loop runs (no host sync), from each finished
  round (`rounds.Round`: what was drafted, accepted, emitted and kept): per original row, rounds
  (target calls it took part in), drafts proposed, accepted and verified, new tokens kept, the
  accepted-length histogram, Σ w / count over the positions that emitted a token (for verifiers
  with a per-position weight) and Σ TV(p, q) over the verified drafts (sampled decoding). `finish`
  hands back a `SpeculativeStats`, and warns (`warn_nonfinite`) when a model's logits had a row
  with no finite maximum: no distribution there.
- `SpeculativeStats`: one generation's statistics, per row (tensors) and in total (properties).
- `Totals`: sums over many generations (batches, repeats, processes) with the same summary;
  `SpeculativeStats.summary()` is `Totals().add(stats).summary()`, so every caller (the engine,
  `evaluate`, training's validation, the bench) reports the same numbers the same way.
- `RECORDED`: the statistics a results record carries (`Totals.record()`; `results.run_fields()`
  and its checks take their names and kinds from here).

A new statistic lives in this file alone: counted per row in `RowCounter.count` from the round (a
name in `COUNTS` or `SUMS`, a field of `SpeculativeStats` and of `Totals`: `finish`, `Totals.add`,
`merge` and the vector across processes follow the names), and, to reach the results records, a
`Totals` property named in `RECORDED`. The module imports torch only where it counts, so the
results and plots read `RECORDED` without torch.

`tokens_per_call_bound` and `theoretical_speedup` are what i.i.d. acceptance α predicts.

Definitions: acceptance rate = accepted / proposed drafts (a row's drafts count only up to its
first drafted EOS); mean accepted length = accepted / rounds; tokens per target call = new tokens /
rounds (1 for plain decoding); tokens/s = new tokens / wall time; mean w = Σ w / emitted tokens.

It does not time anything (callers pass wall times) and knows nothing about models or tasks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from diversed.decoding.rounds import Round

# What `RowCounter` counts per row and round: `SpeculativeStats`' integer counts and float sums
# (`Totals` sums the same fields; a sum that is None was not measured).
COUNTS = ("rounds", "proposed", "accepted", "new_tokens", "w_count", "verified")
SUMS = ("w_sum", "tv_sum")


class Recorded(NamedTuple):
    """A statistic a results record carries: the `Totals` attribute of its name."""

    what: str  # what it is (the record's documentation)
    kind: str = "number"  # "fraction" (in [0, 1]), "number" (a float >= 0) or "count" (an integer >= 0)
    drafts: bool = True  # about drafts: a record of decoding without them has `plain` instead
    plain: float | None = None


# The statistics of a results record, in its order (results.run_fields()): `Totals.record()`.
RECORDED = {
    "acceptance_rate": Recorded("accepted drafts / proposed drafts", "fraction"),
    "alpha": Recorded(
        "accepted drafts / verified drafts (up to and including a round's first rejection)", "fraction"
    ),
    "mean_tv": Recorded(
        "mean TV(p, q) over the verified drafts, sampled decoding: Proposition 1's α = 1 − w·mean_tv",
        "fraction",
    ),
    "verified_drafts": Recorded("drafts the target tested: α's denominator (its sampling error)", "count"),
    "mean_accepted_length": Recorded("mean accepted drafts per round"),
    "tokens_per_target_call": Recorded("new tokens / rounds (1 without drafts)", plain=1.0),
    "mean_w": Recorded(
        "mean w over emitted tokens: the head's (dynamic), the deferral rate (cascade)",
        "fraction",
        drafts=False,
    ),
}
RECORD_FIELDS = tuple(RECORDED)
RECORD_FLOATS = tuple(f for f, r in RECORDED.items() if r.kind != "count")
RECORD_FRACTIONS = tuple(f for f, r in RECORDED.items() if r.kind == "fraction")


def ratio(a: Any, b: Any) -> float:
    """a / b as a float, 0.0 when b is 0."""
    b = float(b)
    return float(a) / b if b > 0 else 0.0


def warn_nonfinite(models: list[str], verifier: str) -> None:
    """One RuntimeWarning naming the models whose logits had a row without a finite maximum (NaN,
    +inf, or −inf everywhere): such a row has no distribution, so what was decoded from it and the
    acceptance and TV counted there mean nothing (softmax gives NaN; argmax picks token 0)."""
    if models:
        import warnings

        warnings.warn(
            f"{' and '.join(models)} gave logits that are not finite "
            "(NaN, +inf, or -inf for every token) during "
            f"{verifier} decoding: those positions have no distribution, and the tokens, acceptance and TV "
            "computed from them are meaningless. Check the model's weights and dtype (fp16 overflow?) "
            "and any logits processor that masks every token.",
            RuntimeWarning,
            stacklevel=5,  # the caller of the decoding loop (past inference_mode)
        )


# ----------------------------------------------------------------------------- one generation


@dataclass
class SpeculativeStats:
    """Acceptance statistics, per row (tensors of length B) and in total (properties)."""

    # Counted by `RowCounter` (`COUNTS`, `SUMS`); a statistic other decoders do not count (the
    # reference's) defaults to None.
    proposed: Tensor  # draft tokens proposed (up to a row's first drafted EOS in each round)
    accepted: Tensor  # draft tokens accepted by verification (before EOS / length cut-off)
    rounds: Tensor  # verification rounds = target calls the row took part in
    new_tokens: Tensor  # tokens in the output (after EOS / max_new_tokens cut-off)
    accepted_hist: Tensor  # [B, N_max+1]: rounds in which 0..N_max drafts were accepted
    w_sum: Tensor  # Σ w over the positions that emitted a token (verifiers with a weight)
    w_count: Tensor
    verified: Tensor | None = None  # drafts the target tested: up to and including the first rejection
    tv_sum: Tensor | None = None  # Σ TV(p, q) over the verified drafts (sampled decoding only)
    # [B, max new]: w at each emitted token (NaN past a row's end; with a weight)
    token_w: Tensor | None = None
    target_calls: int = 0  # batched target forwards (first_token="target": its prompt-only forward too)
    draft_calls: int = 0  # batched draft forwards, prefill excluded
    wall_time_s: float = 0.0
    verifier: str = "lossless"
    num_draft_tokens: list[int] = field(default_factory=list)  # n used in each round
    records_w: bool = False  # the verifier has a per-position weight w (mean_w is defined)

    @property
    def acceptance_rate(self) -> float:
        return ratio(self.accepted.sum(), self.proposed.sum())

    @property
    def row_acceptance_rate(self) -> Tensor:
        return self.accepted / self.proposed.clamp_min(1)

    @property
    def mean_accepted_length(self) -> float:
        return ratio(self.accepted.sum(), self.rounds.sum())

    @property
    def tokens_per_target_call(self) -> float:
        """Mean tokens emitted per verification round of a sequence (1 for plain decoding)."""
        return ratio(self.new_tokens.sum(), self.rounds.sum())

    @property
    def tokens_per_s(self) -> float:
        return ratio(self.new_tokens.sum(), self.wall_time_s)

    @property
    def mean_w(self) -> float | None:
        return ratio(self.w_sum.sum(), self.w_count.sum()) if self.records_w else None

    @property
    def row_mean_w(self) -> Tensor | None:
        return self.w_sum / self.w_count.clamp_min(1) if self.records_w else None

    @property
    def alpha(self) -> float | None:
        """Accepted drafts over verified ones (those the target tested: up to and including a
        round's first rejection): the probability that a tested draft is accepted (Leviathan et
        al.'s α). `acceptance_rate` divides by every proposal, tested or not."""
        return None if self.verified is None else ratio(self.accepted.sum(), self.verified.sum())

    @property
    def mean_tv(self) -> float | None:
        """Mean TV(p, q) over the verified drafts: Proposition 1 predicts an ensemble's α as
        1 − w·mean_tv (None in greedy decoding, where acceptance is an argmax match)."""
        return None if self.tv_sum is None else ratio(self.tv_sum.sum(), self.verified.sum())

    def summary(self) -> dict[str, Any]:
        """Totals as plain numbers (what a results file or a log line wants)."""
        return Totals().add(self).summary()

    def ordinary(self) -> SpeculativeStats:
        """The same statistics with ordinary tensors: copies made outside inference mode (inference
        tensors refuse autograd). In place; returns self."""
        import torch
        from torch import Tensor

        with torch.inference_mode(False):
            for f in fields(self):
                if isinstance(value := getattr(self, f.name), Tensor):
                    setattr(self, f.name, value.clone())
        return self


# ----------------------------------------------------------------------------- many generations


@dataclass
class Totals:
    """Statistics summed over generations; `add` a `SpeculativeStats`, read the same summary."""

    proposed: int = 0
    accepted: int = 0
    rounds: int = 0
    new_tokens: int = 0
    w_sum: float = 0.0
    w_count: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    wall_time_s: float = 0.0
    accepted_hist: list[int] = field(default_factory=list)
    records_w: bool = False
    verified: int = 0
    tv_sum: float | None = None  # None: never measured (greedy)

    def add(self, stats: SpeculativeStats) -> Totals:
        """Add one generation's statistics (in place); returns self."""
        for f in (*COUNTS, *SUMS):  # the per-row counts and sums, where measured
            if (value := getattr(stats, f)) is not None:
                total = float(value.sum()) if value.is_floating_point() else int(value.sum())
                setattr(self, f, (getattr(self, f) or 0) + total)
        self.target_calls += stats.target_calls
        self.draft_calls += stats.draft_calls
        self.wall_time_s += stats.wall_time_s
        hist = stats.accepted_hist.sum(0).tolist()
        width = max(len(hist), len(self.accepted_hist))
        self.accepted_hist = [
            (self.accepted_hist[i] if i < len(self.accepted_hist) else 0) + (hist[i] if i < len(hist) else 0)
            for i in range(width)
        ]
        self.records_w = self.records_w or stats.records_w
        return self

    def merge(self, other: Totals) -> Totals:
        """Add another `Totals` (in place); returns self."""
        for f in self._SCALARS:
            setattr(self, f, getattr(self, f) + getattr(other, f))
        width = max(len(self.accepted_hist), len(other.accepted_hist))
        pad = lambda h: h + [0] * (width - len(h))  # noqa: E731
        self.accepted_hist = [
            a + b for a, b in zip(pad(self.accepted_hist), pad(other.accepted_hist), strict=True)
        ]
        self.records_w = self.records_w or other.records_w
        if other.tv_sum is not None:
            self.tv_sum = (self.tv_sum or 0.0) + other.tv_sum
        return self

    # A fixed layout as a float64 vector, for summing across processes (`from_vector` reverses it):
    # the scalars, records_w, then tv_sum and whether it was measured.
    _SCALARS = (*(f for f in COUNTS + SUMS if f != "tv_sum"), "target_calls", "draft_calls", "wall_time_s")

    def to_vector(self, device: torch.device | str = "cpu") -> Tensor:
        """The scalar totals (not the histogram) as one float64 vector."""
        import torch

        values = [float(getattr(self, f)) for f in self._SCALARS] + [float(self.records_w)]
        values += [self.tv_sum or 0.0, float(self.tv_sum is not None)]
        return torch.tensor(values, dtype=torch.float64, device=device)

    @classmethod
    def from_vector(cls, vector: Tensor) -> Totals:
        values = vector.double().cpu().tolist()
        floats = {f for f in cls._SCALARS if isinstance(getattr(cls, f), float)}  # the rest are counts
        kwargs = {
            f: (v if f in floats else int(round(v))) for f, v in zip(cls._SCALARS, values, strict=False)
        }
        n = len(cls._SCALARS)
        return cls(**kwargs, records_w=values[n] > 0, tv_sum=values[n + 1] if values[n + 2] > 0 else None)

    @property
    def acceptance_rate(self) -> float:
        return ratio(self.accepted, self.proposed)

    @property
    def mean_accepted_length(self) -> float:
        return ratio(self.accepted, self.rounds)

    @property
    def tokens_per_target_call(self) -> float:
        return ratio(self.new_tokens, self.rounds)

    @property
    def tokens_per_s(self) -> float:
        return ratio(self.new_tokens, self.wall_time_s)

    @property
    def mean_w(self) -> float | None:
        return ratio(self.w_sum, self.w_count) if self.records_w else None

    @property
    def alpha(self) -> float | None:
        return ratio(self.accepted, self.verified) if self.verified else None

    @property
    def mean_tv(self) -> float | None:
        return None if self.tv_sum is None else ratio(self.tv_sum, self.verified)

    @property
    def verified_drafts(self) -> int:  # the record's name
        return self.verified

    def record(self, drafts: bool = True) -> dict[str, Any]:
        """The statistics a results record carries (`RECORDED`); `drafts=False` (decoding without
        drafts): those about drafts take their `plain` value (None; 1 token per target call)."""
        return {f: getattr(self, f) if drafts or not r.drafts else r.plain for f, r in RECORDED.items()}

    def summary(self) -> dict[str, Any]:
        """The totals and the rates as plain numbers."""
        return {
            "proposed": self.proposed,
            "accepted": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "accepted_length_histogram": list(self.accepted_hist),
            "rounds": self.rounds,
            "tokens_per_target_call": self.tokens_per_target_call,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "new_tokens": self.new_tokens,
            "wall_time_s": self.wall_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mean_w": self.mean_w,
            "alpha": self.alpha,
            "mean_tv": self.mean_tv,
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- what the statistics predict


def tokens_per_call_bound(alpha: float, n: int) -> float:
    """Expected tokens per target call, n drafts each accepted with probability α: (1 − α^(n+1)) / (1 − α)."""
    if alpha >= 1.0:
        return float(n + 1)
    return (1.0 - alpha ** (n + 1)) / (1.0 - alpha)


def theoretical_speedup(alpha: float, n: int, c: float, v: float = 1.0) -> float:
    """Speedup over autoregressive decoding: (1 − α^(n+1)) / ((1 − α)(n·c + v)), c = draft/target time,
    v = a verification forward's cost in one-token target steps (Leviathan et al.'s 1; the bench also
    prices it at its measured cost)."""
    return tokens_per_call_bound(alpha, n) / (n * c + v)


# ----------------------------------------------------------------------------- during decoding


def first_true(flags: Tensor, default: Tensor | int) -> Tensor:
    """1-based index of each row's first True in `flags` [b, m]; `default` where a row has none."""
    import torch

    return torch.where(flags.any(1), flags.long().argmax(1) + 1, default)


class RowCounter:
    """Statistics per original row, kept on the device while a decoding loop runs: `count` adds a
    finished round, `finish` reads them on the host once."""

    def __init__(
        self,
        batch: int,
        num_draft_tokens: int,
        device: torch.device,
        records_w: bool,
        max_new: int = 0,
        measures_tv: bool = False,
        eos: Tensor | None = None,
    ) -> None:
        import torch

        self.counts = torch.zeros(batch, len(COUNTS), dtype=torch.long, device=device)  # per row: COUNTS
        self.hist = torch.zeros(batch, num_draft_tokens + 1, dtype=torch.long, device=device)
        # SUMS (Σ w, Σ TV), then w of each emitted token (NaN elsewhere; last column: sink)
        self.floats = torch.zeros(batch, len(SUMS) + (max_new + 1 if records_w else 0), device=device)
        if records_w:
            self.floats[:, len(SUMS) :] = float("nan")
        self.records_w, self.measures_tv, self.max_new, self.eos = records_w, measures_tv, max_new, eos
        self.rounds_n: list[int] = []

    def new_tokens(self, rows: Tensor) -> Tensor:
        """Tokens emitted so far by these original rows."""
        return self.counts[rows, COUNTS.index("new_tokens")]

    def count(self, rows: Tensor, r: Round) -> None:
        """Count a finished round (`rounds.Round`, its emission settled: `keep`, `kept`, `cols`) of
        the rows still in the batch, `rows` their original rows."""
        import torch

        n, k, keep = r.n, r.k, r.keep
        ones = torch.ones_like(k)
        proposed, accepted = ones * r.lengths if isinstance(r.lengths, int) else r.lengths, k
        # A row's proposals stop at its first drafted EOS (the drafts after it are cut whatever the
        # verdict, and drafting may stop there) and at its own budget (the batch drafts for the row
        # with the most tokens left; alone a row with r left gets r − 1): α, the histogram and the
        # accepted count of a row are the same on every device and whatever its batch-mates.
        if n > 0 and self.eos is not None and self.eos.numel():
            upto = first_true(torch.isin(r.x, self.eos), n)
            proposed, accepted = torch.minimum(proposed, upto), torch.minimum(accepted, upto)
        if n > 0:
            budget = self.max_new - self.new_tokens(rows) - 1  # the tokens left before this round, − 1
            proposed, accepted = torch.minimum(proposed, budget), torch.minimum(accepted, budget)
        verified = torch.minimum(accepted + 1, proposed)  # tested: the accepted and the first rejected
        counts = {
            "rounds": ones,
            "proposed": proposed,
            "accepted": accepted,
            "new_tokens": keep,
            "w_count": keep if self.records_w else 0 * keep,
            "verified": verified,
        }
        self.counts.index_add_(0, rows, torch.stack([counts[f] for f in COUNTS], 1))
        if n + 1 > self.hist.shape[1]:
            self.hist = torch.cat(
                [self.hist, self.hist.new_zeros(self.hist.shape[0], n + 1 - self.hist.shape[1])], 1
            )
        self.hist.index_put_((rows, accepted), ones, accumulate=True)
        sums = {}
        if self.records_w:  # mean w over the positions that emitted a token, and w at each of them
            b = k.shape[0]
            w_tok = torch.cat([r.w if n > 0 else r.w_next.new_zeros(b, 0), r.w_next.new_zeros(b, 1)], 1)
            w_tok = w_tok.scatter(1, k.view(b, 1), r.w_next.view(b, 1))
            sums["w_sum"] = (w_tok * r.kept).sum(1)
            self.floats[rows.unsqueeze(1), len(SUMS) + r.cols] = w_tok
        else:
            sums["w_sum"] = ones.new_zeros(ones.shape, dtype=self.floats.dtype)
        if self.measures_tv and n > 0:  # TV(p, q) = ½·Σ_x |p(x) − q(x)| at the verified drafts
            from diversed.decoding.verify import total_variation  # torch-free at import (results)

            tv = total_variation(r.p[:, :n], r.q)
            sums["tv_sum"] = (tv * (torch.arange(n, device=tv.device) < verified.unsqueeze(1))).sum(1)
        else:
            sums["tv_sum"] = sums["w_sum"].new_zeros(sums["w_sum"].shape)
        self.floats[:, : len(SUMS)].index_add_(0, rows, torch.stack([sums[f] for f in SUMS], 1))
        self.rounds_n.append(n)

    def finish(self, *, target: Any, draft: Any | None, verifier: str) -> SpeculativeStats:
        """The statistics on the host: two reads, the integer counts (with each model's flag of finite
        logits, `warn_nonfinite`) and the float sums. `target` and `draft` are the loop's
        `forward.SlotModel`s (their `calls` and `maxima`); `draft` None: the target alone."""
        import torch

        models = {"target": target, "draft": draft}
        finite = torch.stack(
            [
                torch.cat([x.reshape(-1) for x in m.maxima]).isfinite().all()
                if m and m.maxima
                else self.counts.new_ones((), dtype=torch.bool)
                for m in models.values()
            ]
        )
        flags = finite.long().expand(self.counts.shape[0], 2)
        ints, floats = torch.cat([self.counts, flags, self.hist], 1).cpu(), self.floats.cpu()
        c, f = len(COUNTS), len(SUMS)
        counts, hist = ints[:, :c], ints[:, c + 2 :]
        ok = ints[:1, c : c + 2].numpy().all(0)  # on the host already (no rows: all true)
        warn_nonfinite([m for m, good in zip(models, ok, strict=True) if not good], verifier)
        sums = {name: floats[:, i] for i, name in enumerate(SUMS)}
        if not self.measures_tv:
            sums["tv_sum"] = None
        return SpeculativeStats(
            **{name: counts[:, i] for i, name in enumerate(COUNTS)},
            **sums,
            accepted_hist=hist,
            token_w=floats[:, f:-1] if self.records_w else None,
            target_calls=target.calls,
            draft_calls=0 if draft is None else draft.calls,
            verifier=verifier,
            num_draft_tokens=self.rounds_n,
            records_w=self.records_w,
        )
