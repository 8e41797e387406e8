"""Prompt passes kept across decoding calls: the KV cache of a batch's prompt, computed once per model.

A sweep decodes the same batches of prompts at every grid point (the same examples, batch size and
order), and on summarisation a prompt pass (both models reading a 500-token article) is a large part
of a point's time. With a `PromptCache`, the engine (`speculative_generate(prompt_cache=...)`) and the
autoregressive loop read each row's prompt but its last token in a call of their own
(`SlotModel.prefill`), and that call's KV cache is kept, keyed by the model and the batch's tokens,
mask and positions; a later call with the same model and batch starts from a copy of it. A hit and
a miss leave the caches bit for bit the same (the miss computed exactly what the hit copies, in a
cache of exactly that many slots), so outputs do not depend on which point read a batch first. They
do differ in float rounding from the default, where the first round reads the prompt and the
round's tokens in one call: the sweep records the separate prompt pass in its settings.

`PromptCache(0)` keeps nothing: the same separate prompt pass, recomputed every call (what the
sweep's timed passes use, so that a time includes reading the prompt).

A model is known by its object (and its forward path: the two keep different caches): one whose
weights change between calls (training) must not share a cache across the change.

It does not decide what to time (a pass that reused prompts is not a fair time: `sweep/times.py`
leaves it out), and it does not share prefixes between different batches (a batch's rows are
keyed together: the sweep's batches repeat whole).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import torch
from torch import Tensor, nn


class PromptCache:
    """The prompt passes' KV caches, as many as fit in `max_bytes` (0: none), first come first kept.

    Nothing is evicted: a sweep reads its batches in the same order at every point, a cyclic scan
    on which least-recently-used eviction would drop each batch just before it is asked for again
    (no hit at all once the batches do not fit); keeping the first ones gives those hits at every
    point. The caches stay on the models' device (GPU memory on a GPU: size it with that in mind)."""

    def __init__(self, max_bytes: float) -> None:
        if max_bytes < 0:
            raise ValueError(f"a prompt cache's size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = float(max_bytes)
        self.entries: dict[tuple, tuple[Any, int, nn.Module]] = {}
        self.bytes = 0
        self.hits = self.misses = 0
        self.seconds = 0.0  # host time spent computing the passes asked for (misses): what hits save

    @staticmethod
    def key(model: nn.Module, ids: Tensor, mask: Tensor, pos: Tensor) -> tuple:
        """What identifies a prompt pass: the model object and the slots' ids, mask and positions."""
        digest = hashlib.blake2b(digest_size=16)
        for t in (ids, mask, pos):
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.detach().to("cpu", torch.long).contiguous().numpy().tobytes())
        return id(model), digest.hexdigest()

    def get(self, key: tuple) -> Any | None:
        """A copy of the cache kept under `key` (the caller writes into it), or None."""
        entry = self.entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        return _copy(entry[0])

    def put(self, key: tuple, cache: Any, model: nn.Module) -> None:
        """Keep a copy of `cache` if it fits in what is left (the model is held, so that its id is
        not reused while kept)."""
        size = nbytes(cache)
        if key in self.entries or self.bytes + size > self.max_bytes:
            return
        self.entries[key] = (_copy(cache), size, model)
        self.bytes += size

    def summary(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "kept": len(self.entries),
            "bytes": int(self.bytes),
            "miss_seconds": round(self.seconds, 3),
        }


def _copy(cache: Any) -> Any:
    """A copy sharing no storage: the direct path's KV tensor, or a transformers cache object."""
    return cache.clone() if isinstance(cache, Tensor) else copy.deepcopy(cache)


def nbytes(cache: Any) -> int:
    """Bytes held by a KV cache: a tensor, or a transformers cache's layers' keys and values."""
    if isinstance(cache, Tensor):
        return cache.numel() * cache.element_size()
    total = 0
    for layer in getattr(cache, "layers", []):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, Tensor):
                total += t.numel() * t.element_size()
    return total
