"""Each model's forwards counted, and timed, by hooks on its embeddings.

- `count_calls`: the forward calls of each model inside a block (the statistics of transformers'
  decoders, `reference.py`);
- `ForwardMeter`: the forwards counted and timed from the input embeddings (start) to the output
  embeddings (stop), into a `ForwardTimes`, each model's prompt pass apart from its decoding steps
  (what `python -m diversed.bench` reports as c, `*_forward_ms` and `*_prefill_ms`);
- `clock`: the wall clock after the device's queued work.

The hooks sit on the embeddings rather than on the model, so that they see every forward however
it is made (`generate`, `model(...)`, or the engine running the decoder layers itself,
`forward.py`). Within a decode call (`ForwardMeter.start_decode`) each model's first forward is its
prompt pass (prefill; a speculative decoder's first target forward may also score the first round's
drafts) and every later forward is a decoding step: the rule holds for any decoder that reads the
prompt in each model's first forward. It does not look at what a forward is fed, and it times
nothing but forwards (a decode call's wall time is the caller's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

MODELS = ("target", "draft")


def _per_model(zero: float) -> Callable[[], dict[str, Any]]:
    return lambda: dict.fromkeys(MODELS, zero)


@dataclass
class ForwardTimes:
    """Forwards of each model (target, draft): every one counted and timed, and the prompt passes
    among them."""

    calls: dict[str, int] = field(default_factory=_per_model(0))  # every forward, prompt passes included
    seconds: dict[str, float] = field(default_factory=_per_model(0.0))
    prefill_calls: dict[str, int] = field(default_factory=_per_model(0))  # each model's first per call
    prefill_s: dict[str, float] = field(default_factory=_per_model(0.0))

    def add_time(self, model: str, seconds: float, prefill: bool) -> None:
        self.seconds[model] += seconds
        if prefill:
            self.prefill_s[model] += seconds

    def merge(self, other: ForwardTimes) -> ForwardTimes:
        """Add another's counts and times (in place); returns self."""
        for name in ("calls", "seconds", "prefill_calls", "prefill_s"):
            mine, theirs = getattr(self, name), getattr(other, name)
            for model in mine:
                mine[model] += theirs[model]
        return self

    def step_ms(self, model: str) -> float | None:
        """The model's mean decoding step in ms (prompt passes excluded); None without one."""
        steps = self.calls[model] - self.prefill_calls[model]
        return 1e3 * (self.seconds[model] - self.prefill_s[model]) / steps if steps else None

    def prefill_ms(self, model: str) -> float | None:
        """The model's mean prompt pass in ms; None without one."""
        n = self.prefill_calls[model]
        return 1e3 * self.prefill_s[model] / n if n else None


class ForwardMeter:
    """Counts each model's forwards into `times` (a `ForwardTimes`; None: not counting) and, `timed`,
    their time from embedding to logits. Call `start_decode` right before each decode call (one
    `generate`, one engine call, one loop call): each model's next forward is then its prompt pass.
    On a GPU the hooks record CUDA events (a host clock would time the kernel launches), added to
    the times by `flush` after a synchronize. `close` removes the hooks."""

    def __init__(self, models: dict[str, nn.Module], timed: bool = True) -> None:
        self.times: ForwardTimes | None = None
        self._t0: dict[str, Any] = {}
        self._read: set[str] = set()  # the models that made their prompt pass in this decode call
        self.cuda = timed and next(next(iter(models.values())).parameters()).device.type == "cuda"
        self.pending: list[tuple[str, bool, Any, Any]] = []  # (model, prompt pass?, start, stop)
        self.handles = []
        for name, model in models.items():
            if timed:
                self.handles.append(model.get_input_embeddings().register_forward_pre_hook(self._start(name)))
            self.handles.append(model.get_output_embeddings().register_forward_hook(self._stop(name, timed)))

    def start_decode(self) -> None:
        """A decode call begins: the next forward of each model is its prompt pass."""
        self._read.clear()

    def _start(self, name: str) -> Callable:
        return lambda module, args: self._t0.__setitem__(name, _event() if self.cuda else time.perf_counter())

    def _stop(self, name: str, timed: bool) -> Callable:
        def hook(module, args, output):
            if self.times is None:
                return
            prefill = name not in self._read
            self._read.add(name)
            self.times.calls[name] += 1
            self.times.prefill_calls[name] += prefill
            if not timed:
                return
            if self.cuda:
                self.pending.append((name, prefill, self._t0[name], _event()))
            else:
                self.times.add_time(name, time.perf_counter() - self._t0[name], prefill)

        return hook

    def flush(self, times: ForwardTimes) -> None:
        """Add the recorded GPU forward times to `times` (after a synchronize)."""
        for name, prefill, start, stop in self.pending:
            times.add_time(name, start.elapsed_time(stop) / 1e3, prefill)
        self.pending.clear()

    def close(self) -> None:
        for h in self.handles:
            h.remove()


@contextmanager
def count_calls(models: dict[str, nn.Module]) -> Iterator[dict[str, int]]:
    """Forward calls of each model inside the block (a `ForwardMeter` that only counts)."""
    meter = ForwardMeter(models, timed=False)
    meter.times = ForwardTimes(*(dict.fromkeys(models, zero) for zero in (0, 0.0, 0, 0.0)))
    try:
        yield meter.times.calls
    finally:
        meter.close()


def _event():
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def clock(device: torch.device) -> float:
    """Wall clock after the device's queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
