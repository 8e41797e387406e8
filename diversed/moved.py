"""The modules' names from before the package was laid out in subpackages, still importable.

`import diversed.engine` (a notebook, a pickle, a config's `_target_` written before the move)
gives `diversed.decoding.engine` itself, with a FutureWarning naming the new name; `current_name`
translates a dotted name. The package itself never uses the old names (tests/test_structure.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

OLD_NAMES = {
    "diversed.atomic": "diversed.files.atomic",
    "diversed.autoregressive": "diversed.decoding.autoregressive",
    "diversed.checkpoints": "diversed.training.checkpoints",
    "diversed.compare": "diversed.analysis.compare",
    "diversed.config_keys": "diversed.config.keys",
    "diversed.confine": "diversed.tasks.confine",
    "diversed.draft_vocab": "diversed.decoding.draft_vocab",
    "diversed.engine": "diversed.decoding.engine",
    "diversed.execution": "diversed.tasks.execution",
    "diversed.figures": "diversed.analysis.figures",
    "diversed.forward": "diversed.decoding.forward",
    "diversed.fronts": "diversed.analysis.fronts",
    "diversed.heads": "diversed.models.heads",
    "diversed.hub": "diversed.models.hub",
    "diversed.inputs": "diversed.decoding.inputs",
    "diversed.jobs": "diversed.config.jobs",
    "diversed.memcg": "diversed.tasks.memcg",
    "diversed.methods": "diversed.sweep.methods",
    "diversed.pair": "diversed.models.pair",
    "diversed.preflight": "diversed.sweep.preflight",
    "diversed.prompts": "diversed.training.prompts",
    "diversed.provenance": "diversed.files.provenance",
    "diversed.published": "diversed.analysis.published",
    "diversed.reference": "diversed.decoding.reference",
    "diversed.results": "diversed.sweep.results",
    "diversed.rules": "diversed.decoding.rules",
    "diversed.rundir": "diversed.files.rundir",
    "diversed.runtime": "diversed.config.runtime",
    "diversed.schema": "diversed.config.schema",
    "diversed.slots": "diversed.decoding.slots",
    "diversed.stats": "diversed.decoding.stats",
    "diversed.stopping": "diversed.decoding.stopping",
    "diversed.tables": "diversed.analysis.tables",
    "diversed.teacher": "diversed.training.teacher",
    "diversed.times": "diversed.sweep.times",
    "diversed.toy_corpus": "diversed.models.toy_corpus",
    "diversed.verify": "diversed.decoding.verify",
}


def current_name(dotted: str) -> str:
    """`diversed.pair.load_pair` -> `diversed.models.pair.load_pair`; any other name unchanged."""
    for old, new in OLD_NAMES.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old) :]
    return dotted


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new one (one module object under both names)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec) -> ModuleType:
        self.module = importlib.import_module(self.new)
        self.spec = self.module.__spec__
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # importlib set the old name's spec on it: the module keeps its own


class _OldNames(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in OLD_NAMES:
            return None
        warnings.warn(
            f"`{name}` is now `{OLD_NAMES[name]}`: import it by its new name", FutureWarning, stacklevel=2
        )
        return importlib.util.spec_from_loader(name, _Alias(OLD_NAMES[name]))


def install() -> None:
    """Make the old names importable (after every real finder: a module that exists wins)."""
    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        sys.meta_path.append(_OldNames())
