"""The slot layout the engine's two KV caches share, and its output buffer.

Slot s holds the token `ids[:, s]` at position `pos[:, s]`; `mask[:, s]` says whether it is part
of the row's text. A round opens room for n drafts and the token after them, writes the kept
tokens to the output, and commits the longest accepted prefix: rows that accepted fewer keep
masked holes, so nothing is re-encoded and no row waits for another. Finished rows leave.

It does not call models, verify or count statistics (`engine.py`, `forward.py`, `stats.py`).
"""

from __future__ import annotations

import torch
from torch import Tensor


class Slots:
    """The rows still in the batch, the slot layout both caches share, and the output buffer.
    `cur` is the slot of t0, the last emitted token, in neither cache yet."""

    def __init__(self, input_ids: Tensor, attention_mask: Tensor, pad: int, max_new: int, n: int) -> None:
        B, P = input_ids.shape
        device = input_ids.device
        cap = P + 8 * (n + 2)  # grown on demand
        self.pad, self.max_new = pad, max_new
        self.ids = torch.full((B, cap), pad, dtype=torch.long, device=device)
        self.mask = torch.zeros((B, cap), dtype=torch.long, device=device)
        self.pos = torch.zeros((B, cap), dtype=torch.long, device=device)
        self.ids[:, :P], self.mask[:, :P] = input_ids, attention_mask.long()
        self.pos[:, :P] = (self.mask[:, :P].cumsum(-1) - 1).clamp_min(0)
        self.out = torch.full((B, max_new + 1), pad, dtype=torch.long, device=device)  # last col: sink
        self.rows = torch.arange(B, device=device)  # original index of each row still in the batch
        self.cur = P - 1
        self._ramps: dict[int, Tensor] = {}

    def ramp(self, n: int) -> Tensor:
        """torch.arange(n + 1), made once per n."""
        if n not in self._ramps:
            self._ramps[n] = torch.arange(n + 1, device=self.ids.device)
        return self._ramps[n]

    def open_round(self, n: int) -> None:
        """Room, positions and a tentative mask for n drafts and the token after them."""
        cur = self.cur
        if self.ids.shape[1] < cur + n + 2:
            self.ids, self.mask, self.pos = (
                torch.cat([t, torch.full_like(t, f)], 1)
                for t, f in ((self.ids, self.pad), (self.mask, 0), (self.pos, 0))
            )
        self.pos[:, cur + 1 : cur + n + 2] = self.pos[:, cur : cur + 1] + (self.ramp(n) + 1)
        self.mask[:, cur + 1 : cur + n + 1] = 1  # tentative: the target reads the drafts causally

    def emit(self, emitted: Tensor, kept: Tensor, n_new: Tensor, steps: Tensor) -> Tensor:
        """Write each row's kept tokens after its `n_new` earlier ones (the rest goes to the sink);
        returns the columns written."""
        cols = torch.where(kept, n_new.unsqueeze(1) + steps, self.max_new)
        self.out[self.rows.unsqueeze(1), cols] = emitted
        return cols

    def commit(self, k: Tensor, longest: int, nxt: Tensor, n: int, steps: Tensor) -> int:
        """Keep the accepted drafts and the next token; returns the new `cur` (the caches' length):
        the longest accepted prefix, shorter rows keep masked holes."""
        cur, new_cur = self.cur, self.cur + 1 + longest
        self.mask[:, cur + 1 : cur + n + 1] = steps[:n] < k.unsqueeze(1)
        self.ids[:, new_cur], self.mask[:, new_cur], self.pos[:, new_cur] = nxt, 1, self.pos[:, cur] + k + 1
        self.cur = new_cur
        return new_cur

    def select(self, idx: Tensor) -> None:
        self.rows = self.rows[idx]
        if self.rows.shape[0]:
            self.ids, self.mask, self.pos = self.ids[idx], self.mask[idx], self.pos[idx]
