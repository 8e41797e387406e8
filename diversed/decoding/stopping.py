"""Where a generated row ends: at EOS, at the length budget, or once its text holds a stop sequence.

One home for stopping, used by the engine, the autoregressive loop, `evaluate`'s `generate`
reference and training rollouts:
- `StopAtText`: the `stop(new_tokens, n)` callback a task builds (`Task.stopper`): None while the
  row's text holds no stop sequence, else how many tokens to keep;
- `stop_triggers`: the token ids that can complete a stop sequence, so callers ask the callback
  only about rows that produced one (`trigger_mask` reads them as a mask over a vocabulary);
- `HostStopCheck`: the decoding loops' host-side copy of each row's new tokens and the check of
  the rows that kept a trigger, with array ops (no loop over the batch);
- `GenerateStop`: the same check as a transformers `StoppingCriteria` for `model.generate`;
- `generated_lengths` and `decode_completions`: how many new tokens a row kept, and their text.

It does not generate, sample or score; what a stop sequence is belongs to the task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- text


def decode_completions(tokenizer: Any, sequences: Any, prompt_len: int, new_tokens: Any) -> list[str]:
    """The text the task scores: each row's first `new_tokens[i]` tokens after the prompt
    (`sequences` [B, prompt + new] and `new_tokens` [B] are tensors), special tokens skipped."""
    rows = [
        row[prompt_len : prompt_len + n]
        for row, n in zip(sequences.tolist(), new_tokens.tolist(), strict=True)
    ]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


class StopAtText:
    """Stops a generation where `truncate` would cut its text: called with a row's new tokens so
    far (and how many of them are new since the last call), returns None while
    `truncate(text) == text`, else the fewest tokens whose text already holds the stop sequence
    (found by bisection: about log2(length) decodes, once per row).

    Each call first decodes only the new tokens and a margin before them (4 tokens per character
    of the longest stop sequence, enough for byte-level tokens): a stop sequence completed by them
    lies in that tail, so the whole text is decoded only when the tail holds one.

    With `triggers=True` (valid when `truncate` cuts at the first of `stop`, as `Task.truncate`
    does) it also holds `triggers`, a bool mask over the tokenizer's ids from `stop_triggers`:
    a text can only come to hold a stop sequence with one of those tokens, so callers skip the
    call for rows whose new tokens hold none (the engine checks the round's tokens on the host
    with array ops, `evaluate`'s `generate` baseline the newest token on the device).

    The completion the task scores is the same as without stopping (it is cut at the same place),
    as long as decoding a prefix gives a prefix of the text; the tokens after the stop are never
    generated. Text is decoded as `decode_completions` does (special tokens skipped).
    """

    def __init__(
        self, tokenizer: Any, truncate: Callable[[str], str], stop: Sequence[str], *, triggers: bool = False
    ) -> None:
        self.tokenizer, self.truncate, self.stop = tokenizer, truncate, tuple(stop)
        self.margin = 4 * max(len(s) for s in self.stop) + 4
        self.triggers = None
        if triggers:
            try:
                self.triggers = stop_triggers(tokenizer, self.stop)
            except Exception as e:  # a tokenizer that cannot decode every id alone: ask every row
                log.warning(
                    "stop triggers unavailable (%s: %s); every row is checked each round", type(e).__name__, e
                )

    def _stopped(self, tokens: Sequence[int]) -> bool:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return len(self.truncate(text)) < len(text)

    def __call__(self, tokens: Sequence[int], new: int | None = None) -> int | None:
        if new is not None:
            tail = self.tokenizer.decode(tokens[-(new + self.margin) :], skip_special_tokens=True)
            if not any(s in tail for s in self.stop):
                return None
        if not self._stopped(tokens):
            return None
        lo, hi = 0, len(tokens)  # tokens[:lo] has not stopped, tokens[:hi] has
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._stopped(tokens[:mid]) else (mid, hi)
        return hi


def stop_triggers(tokenizer: Any, stop: Sequence[str]) -> torch.Tensor:
    """Bool mask over `tokenizer`'s ids: True where appending the token can make a text hold one
    of `stop` that it did not hold before. (Every id decoded twice: 0.4–0.6 s for 32k ids, fast tokenizer.)

    A new occurrence ends in the appended token's text, so that text either contains the whole
    stop sequence or starts with a suffix of it (`s[-j:]`, j >= 1). The token's text is read as
    it decodes after an ordinary token ("a" + token, minus "a", which keeps the leading space
    SentencePiece drops at the start of a text) and alone; a token whose text is not a clean
    append (incomplete UTF-8 bytes decode to U+FFFD, a decode that rewrites the "a") counts as a
    trigger, and so does a suffix after leading spaces (decoders that clean up spaces before
    punctuation). Tokens that decode to nothing (special tokens, skipped as in `_stopped`) leave
    the text as it was and are not triggers. Anything unsure is True: a False must be certain.
    """
    n = len(tokenizer)
    anchor = list(tokenizer.encode("a", add_special_tokens=False))[-1:]
    base = tokenizer.decode(anchor, skip_special_tokens=True)
    after = tokenizer.batch_decode([anchor + [t] for t in range(n)], skip_special_tokens=True)
    alone = tokenizer.batch_decode([[t] for t in range(n)], skip_special_tokens=True)
    suffixes = tuple({s[-j:] for s in stop for j in range(1, len(s) + 1)})

    def can_complete(text: str) -> bool:
        if "\ufffd" in text or any(s in text for s in stop):
            return True
        return text.startswith(suffixes) or text.lstrip(" ").startswith(suffixes)

    mask = [
        not a.startswith(base) or can_complete(a[len(base) :]) or can_complete(b)
        for a, b in zip(after, alone, strict=True)
    ]
    return torch.tensor(mask, dtype=torch.bool)


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


# ----------------------------------------------------------------------------- decoding loops


class HostStopCheck:
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


class GenerateStop:
    """`model.generate`'s side of a task's `stop` callback, passed in its `stopping_criteria` (a
    callable (input_ids, scores) -> done per row, as a transformers `StoppingCriteria`): a row
    ends once its new tokens reach a stop sequence, as it does in the engine. `cuts[i]` is how many
    new tokens row i keeps (None while it has not stopped). With `stop.triggers`, only rows whose
    newest token is one are asked (picked on the device)."""

    def __init__(
        self, stop: Callable[[list[int], int], int | None], prompt_len: int, batch: int, vocab: int, device
    ) -> None:
        self.stop, self.prompt_len = stop, prompt_len
        self.cuts: list[int | None] = [None] * batch
        self.triggers = None if (mask := trigger_mask(stop, vocab)) is None else mask.to(device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)

    def __call__(self, input_ids: Tensor, scores: Any, **kwargs: Any) -> Tensor:
        # one new token per row since the last call; a stopped row stays stopped
        ask = ~self.done if self.triggers is None else self.triggers[input_ids[:, -1]] & ~self.done
        rows = ask.nonzero().flatten().tolist()
        if rows:
            for i, tokens in zip(rows, input_ids[rows, self.prompt_len :].tolist(), strict=True):
                self.cuts[i] = self.stop(tokens, 1)
            self.done[rows] = torch.tensor([self.cuts[i] is not None for i in rows], device=self.done.device)
        return self.done.clone()


def generated_lengths(new: Tensor, eos: Sequence[int], cuts: Sequence[int | None] | None = None) -> Tensor:
    """Tokens each row of `generate`'s new tokens [B, m] kept: up to and including its first EOS
    (all m if none), and no more than its stop cut (`GenerateStop.cuts`) where it has one."""
    n = torch.full((new.shape[0],), new.shape[1], dtype=torch.long)
    if eos and new.shape[1]:
        is_eos = torch.isin(new, torch.tensor(list(eos), device=new.device)).cpu()
        n = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, n)
    if cuts is not None:
        n = torch.tensor([k if c is None else min(c, k) for c, k in zip(cuts, n.tolist(), strict=True)])
    return n
