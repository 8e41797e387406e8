"""What a sweep's methods load besides the pair: the values of their path knobs (heads, fine-tuned
drafts, a plugin's own files), each checked, digested and loaded as its knob's `Files` says
(`methods.py`), never by a method's name: a method of one's own that reuses `HEAD` gets its head
points as `dynamic` does.

`check_resources` runs before any weights load (each knob's `Files.check` over its `sweep.<key>`
list, for the knobs of the methods in `sweep.methods`); `Resources` then gives each point's settings
(each value's digest under its `Files.settings` key: "head", "draft") and record fields
(`Files.record`); `load_resources` loads them once the pair is loaded (`Files.load`; none: the path
itself). It decodes nothing and writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from diversed.errors import ConfigError
from diversed.sweep.methods import METHODS, Files, Knob

log = logging.getLogger(__name__)


def path_knobs(methods: Iterable[str]) -> list[Knob]:
    """The path knobs of `methods` (names), each once, in the order the methods name them."""
    out: list[Knob] = []
    for name in methods:
        out += [k for k in METHODS[name].knobs if k.path and k not in out]
    return out


@dataclass
class Resources:
    """The checked values of a sweep's path knobs: `found[field]` maps each path to its digest
    (what `Files.check` returned), `fields[field]` each path to its record fields (`Files.record`)."""

    knobs: list[Knob] = field(default_factory=list)
    found: dict[str, dict[str, Any]] = field(default_factory=dict)
    fields: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def paths(self) -> dict[str, list[str]]:
        """Each path knob's checked values by its field (the grid's values for it)."""
        return {f: list(found) for f, found in self.found.items()}

    def settings(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """The digests of the point's path values, each under its knob's `Files.settings` key."""
        out = {}
        for k in METHODS[point["method"]].knobs:
            if k.path and (found := self.found.get(k.field, {}).get(point.get(k.field))):
                out[k.files.settings] = found  # type: ignore[union-attr]
        return out

    def record(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """The record fields of the point's path values (a head's: the task it was trained on)."""
        out: dict[str, Any] = {}
        for k in METHODS[point["method"]].knobs:
            if k.path and point.get(k.field):
                out |= self.fields.get(k.field, {}).get(point[k.field], {})
        return out


def check_resources(card: Any, sweep: Mapping[str, Any]) -> Resources:
    """Each path knob of `sweep.methods` checked (its `Files.check` over `sweep.<key>`), before any
    weights load (one path under two knobs that load it differently refused first: what is loaded is
    keyed by path); a warning for a method whose path knob lists nothing (it gets no points)."""
    methods = list(sweep["methods"])
    resources = Resources(path_knobs(methods))
    taken: dict[str, Knob] = {}  # loaded objects are keyed by path: one path, one way to load it
    for k in resources.knobs:
        for path in (str(p) for p in (sweep.get(k.sweep) or ())):
            other = taken.setdefault(path, k)
            if other.files.load != k.files.load:  # type: ignore[union-attr]
                raise ConfigError(
                    f"{path} is in sweep.{other.sweep} and in sweep.{k.sweep}, whose knobs load it in "
                    "different ways (a verifier reads what is loaded by path): give each a path of its own"
                )
    for k in resources.knobs:
        files: Files = k.files  # type: ignore[assignment]
        paths = [str(p) for p in (sweep.get(k.sweep) or ())]
        found = Files.function(files.check)(card, paths, sweep, k)
        resources.found[k.field] = found
        describe = Files.function(files.record) if files.record else None
        resources.fields[k.field] = {p: describe(p, d) if describe else {} for p, d in found.items()}
        if not found:
            for name in (m for m in methods if k in METHODS[m].knobs):
                log.warning(f"sweep.methods has {name} but sweep.{k.sweep} is empty: no {name} points")
    return resources


def load_resources(resources: Resources, pair: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(loaded, drafts): every checked path's loaded object by path (`Files.load`; none: the path
    itself), what the verifiers read; and those that decode as the pair's draft (`Files.replaces_draft`)."""
    loaded: dict[str, Any] = {}
    drafts: dict[str, Any] = {}
    for k in resources.knobs:
        files: Files = k.files  # type: ignore[assignment]
        paths = list(resources.found.get(k.field, {}))
        objects = Files.function(files.load)(paths, pair) if files.load else {p: p for p in paths}
        loaded |= objects
        if files.replaces_draft:
            drafts |= objects
    return loaded, drafts
