"""One round of decoding as data: `Round`, what the engine's steps hand on and the statistics count.

A round, for the rows still in the batch: the draft proposes x_1..x_n ~ q (`lengths` per row: n,
or fewer where a confidence threshold stopped a row); the target's one forward over
[t0, x_1..x_n] gives p_1..p_{n+1}; the verifier's w at the drafts and its accept test keep the
first k; the token after them, `nxt`, comes from the rejection law (k < lengths) or the bonus law
(`full`: every proposal accepted), w_next being w there; the host then settles how many of the
round's tokens each row keeps (`keep`: cut at EOS, at the length budget or at a stop sequence) and
where they went in the output (`cols`).

`engine.py` fills a `Round` step by step (draft, score, verify, next token, a bonus that needs the
draft, emission), each step returning it with its own fields set (`_replace`), and hands the
finished round to `stats.RowCounter.count`: a statistic is computed there, from the round. A round
without drafts that emits one token (`Round.single`) is a step of plain decoding
(`autoregressive.py`) and the engine's first token from the target alone.

It computes nothing about the algorithm (the engine and `verify.py` do) and counts nothing
(`stats.py` does).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Round(NamedTuple):
    """One round of the b rows still in the batch; a field is None until its step has run."""

    n: int  # drafts proposed (the batch's: at most the asked N, fewer if drafting ended early)
    lengths: Tensor | int  # drafts proposed per row: n, or [b] with a confidence threshold
    # [b, n] the drafts x_1..x_n ~ q (the engine's: a view of its slots, until the round is committed)
    x: Tensor
    q: Tensor | None = None  # [b, n, V] q_1..q_n (logits where no probabilities are needed); None: n = 0
    # [b, n, H] the draft's last hidden states at each draft (a verifier with a head)
    h_q: Tensor | None = None
    logits_p: Tensor | None = None  # [b, n + 1, V] the target's logits at [t0, x_1..x_n]
    p: Tensor | None = None  # [b, n + 1, V] p_1..p_{n+1} (the logits where no probabilities are needed)
    h_p: Tensor | None = None  # [b, n + 1, H] the target's last hidden states there
    w: Tensor | float | None = None  # the verifier's parameter at the drafts ([b, n], a float, or None)
    k: Tensor | None = None  # [b] drafts accepted: the longest accepted prefix
    full: Tensor | None = None  # [b] k == lengths: every proposal accepted, the next token is the bonus
    nxt: Tensor | None = None  # [b] the token after the accepted prefix (rejection or bonus law)
    w_next: Tensor | None = None  # [b] w at that token (1 for a bonus from p); None: no w recorded
    # [b] full rows whose coin chose q (`Verifier.bonus_coin`; `_draft_bonus` draws them from q_L);
    # None: no coin, every full row's bonus needs q
    needs_q: Tensor | None = None
    keep: Tensor | None = None  # [b] the round's tokens [x_1..x_k, nxt] each row keeps (EOS, budget, stop)
    kept: Tensor | None = None  # [b, n + 1] which of them: position < keep
    cols: Tensor | None = None  # [b, n + 1] where they went in the output (the sink past a row's end)

    @classmethod
    def single(
        cls,
        token: Tensor,
        w: Tensor | None = None,
        *,
        zeros: Tensor | None = None,
        ones: Tensor | None = None,
        **emitted: Tensor,
    ) -> Round:
        """A round without drafts that emits `token` [b], from the bonus law (so `full`), with `w`
        there (None where the verifier records no w): no draft proposed, none accepted. `zeros` [b]
        (long) and `ones` [b] (bool): buffers a loop allocates once, so that a step of plain decoding
        costs no allocation or kernel here; `emitted`: the host's `keep`, `kept` and `cols`."""
        k = torch.zeros_like(token) if zeros is None else zeros
        full = torch.ones_like(k, dtype=torch.bool) if ones is None else ones
        return cls(n=0, lengths=0, x=token[:, None][:, :0], k=k, full=full, nxt=token, w_next=w, **emitted)
