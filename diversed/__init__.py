"""diversed: relaxed speculative decoding via dynamic ensemble verification (DIVERSED).

`speculative_generate(target, draft, input_ids, verifier=...)` decodes with the draft proposing
and the target verifying against v = w·p + (1 − w)·q, w the weight on the TARGET. Names are
imported lazily, so `diversed.sweep.results` or `diversed.plot` do not pay for torch and transformers.
`diversed.register(diversed.Method(...))` adds a method of one's own (README, "Add your own method"),
reusing the knobs exported here (`HEAD`, `DRAFT_MODEL`, `WEIGHT`, ...) or its own `Knob`s;
`diversed.register_task("my", MyTask)` a task (README, "Adding a task"); `plugins=[my_pkg.mod]` loads
such a module on any entry point's command line. Importing it fills no registry of Hydra's: the entry
points do that before composing (`diversed.prepare_hydra`, `sweep/plugins.py`).
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
    "Files": "diversed.sweep.methods",  # what a path knob's values are: how they are checked, loaded
    "Method": "diversed.sweep.methods",
    "register": "diversed.sweep.methods",
    "unregister": "diversed.sweep.methods",
    # the built-in knobs a method of one's own may reuse (its points then take the same sweep.<key>)
    "WEIGHT": "diversed.sweep.methods",
    "HEAD": "diversed.sweep.methods",
    "DRAFT_MODEL": "diversed.sweep.methods",
    "LENIENCE": "diversed.sweep.methods",
    "CASCADE_RULE": "diversed.sweep.methods",
    "CASCADE_ALPHA": "diversed.sweep.methods",
    "TYPICAL_EPSILON": "diversed.sweep.methods",
    "TYPICAL_DELTA": "diversed.sweep.methods",
    "Task": "diversed.tasks.base",  # a task of one's own: register_task(name, MyTask)
    "Option": "diversed.tasks.base",
    "register_task": "diversed.tasks",
    "unregister_task": "diversed.tasks",
    "load_plugins": "diversed.sweep.plugins",
    "prepare_hydra": "diversed.sweep.plugins",
}
__all__ = sorted([*_EXPORTS, "CONFIG_DIR"])

# Hydra's config directory for the entry points (`diversed.train`, `diversed.evaluate`)
CONFIG_DIR = str(Path(__file__).resolve().parent / "configs")

# `diversed.engine` and the other names from before the subpackages still import (with a warning)
from diversed.moved import install  # noqa: E402

install()


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'diversed' has no attribute {name!r}")
