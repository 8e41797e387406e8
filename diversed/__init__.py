"""diversed: relaxed speculative decoding via dynamic ensemble verification (DIVERSED).

`speculative_generate(target, draft, input_ids, verifier=...)` decodes with the draft proposing
and the target verifying against v = w·p + (1 − w)·q, w the weight on the TARGET. Names are
imported lazily, so `diversed.results` or `diversed.plot` do not pay for torch and transformers.
`diversed.register(diversed.Method(...))` adds a method of one's own (README, "Add your own method").
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

_EXPORTS = {
    "speculative_generate": "diversed.engine",
    "SpeculativeOutput": "diversed.engine",
    "autoregressive_generate": "diversed.autoregressive",
    "transformers_generate": "diversed.reference",
    "SpeculativeStats": "diversed.stats",
    "Totals": "diversed.stats",
    "WeightHead": "diversed.heads",
    "Verifier": "diversed.verify",
    "Ensemble": "diversed.verify",
    "Lossless": "diversed.verify",
    "StaticEnsemble": "diversed.verify",
    "DynamicEnsemble": "diversed.verify",
    "LossySD": "diversed.rules",
    "Cascade": "diversed.rules",
    "TypicalAcceptance": "diversed.rules",
    "Knob": "diversed.methods",  # a method of one's own: register(Method(..., knobs=(Knob(...),)))
    "Method": "diversed.methods",
    "register": "diversed.methods",
    "load_plugins": "diversed.methods",
}
__all__ = sorted([*_EXPORTS, "CONFIG_DIR"])


def __getattr__(name: str) -> Any:
    if name == "CONFIG_DIR":
        # Hydra's config directory for the entry points (`diversed.train`, `diversed.evaluate`); read, it also
        # puts the registered methods' knob grids where evaluate.yaml's `sweep_knobs` default finds them
        from diversed.config_keys import store_sweep_grids

        store_sweep_grids()
        return str(Path(__file__).resolve().parent / "configs")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'diversed' has no attribute {name!r}")
