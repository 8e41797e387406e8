"""diversed: relaxed speculative decoding via dynamic ensemble verification (DIVERSED).

`speculative_generate(target, draft, input_ids, verifier=...)` decodes with the draft proposing
and the target verifying against v = w·p + (1 − w)·q, w the weight on the TARGET. Names are
imported lazily, so `diversed.sweep.results` or `diversed.plot` do not pay for torch and transformers.
`diversed.register(diversed.Method(...))` adds a method of one's own (README, "Add your own method").
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

_EXPORTS = {
    "speculative_generate": "diversed.decoding.engine",
    "SpeculativeOutput": "diversed.decoding.engine",
    "autoregressive_generate": "diversed.decoding.autoregressive",
    "transformers_generate": "diversed.decoding.reference",
    "SpeculativeStats": "diversed.decoding.stats",
    "Totals": "diversed.decoding.stats",
    "WeightHead": "diversed.models.heads",
    "Verifier": "diversed.decoding.verify",
    "Ensemble": "diversed.decoding.verify",
    "Lossless": "diversed.decoding.verify",
    "StaticEnsemble": "diversed.decoding.verify",
    "DynamicEnsemble": "diversed.decoding.verify",
    "LossySD": "diversed.decoding.rules",
    "Cascade": "diversed.decoding.rules",
    "TypicalAcceptance": "diversed.decoding.rules",
    "Knob": "diversed.sweep.methods",  # a method of one's own: register(Method(..., knobs=(Knob(...),)))
    "Method": "diversed.sweep.methods",
    "register": "diversed.sweep.methods",
    "load_plugins": "diversed.sweep.methods",
}
__all__ = sorted([*_EXPORTS, "CONFIG_DIR"])

# `diversed.engine` and the other names from before the subpackages still import (with a warning)
from diversed.moved import install  # noqa: E402

install()


def __getattr__(name: str) -> Any:
    if name == "CONFIG_DIR":
        # Hydra's config directory for the entry points (`diversed.train`, `diversed.evaluate`); read, it also
        # puts the registered methods' knob grids where evaluate.yaml's `sweep_knobs` default finds them
        from diversed.config.keys import store_sweep_grids

        store_sweep_grids()
        return str(Path(__file__).resolve().parent / "configs")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'diversed' has no attribute {name!r}")
