"""The method registry: every decoding method a sweep compares, defined once.

A method has a name (the `method` field of a results record), a label for tables and legends,
whether it is speculative (it has a draft length N and an acceptance rate), which decoding loop
runs it (the engine, our autoregressive loop, or transformers' own), the record fields
that hold its knob (static: `weight`; dynamic: `head`), the `sweep.<key>` that lists the knob's
values, and how to build its verifier for a grid point. `evaluate` expands its grid from here,
`results` checks records against it, and `plot` orders and labels rows by it; a new method is
one entry in `METHODS`.

It does not import torch or the models at import time (results and plots read it without them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # table row / legend label, formatted with the record's knob fields
    speculative: bool  # has num_draft_tokens and an acceptance rate
    decoder: str = "engine"  # engine (speculative_generate) | autoregressive (our loop) | transformers
    knobs: tuple[str, ...] = ()  # record fields set for this method, and only for it
    sweep: str | None = None  # the sweep config key listing the knob values, one grid point each
    verifier: Callable[[Mapping[str, Any], Mapping[str, Any]], Any] | None = None  # (point, heads) -> Verifier

    def describe(self, record: Mapping[str, Any]) -> str:
        """The label of one record, e.g. "Static w=0.5"."""
        values = {k: record.get(k) for k in self.knobs}
        if "head" in values and values["head"] is not None:
            values["head"] = head_label(values["head"])
        return self.label.format(**values)


def head_label(head: Any) -> str:
    """A short name for a head path: its last two path parts without the suffix."""
    parts = Path(str(head)).with_suffix("").parts
    return "/".join(parts[-2:]) if parts else str(head)


def _lossless(point, heads):
    from diversed.verify import Lossless

    return Lossless()


def _static(point, heads):
    from diversed.verify import StaticEnsemble

    return StaticEnsemble(point["weight"])


def _dynamic(point, heads):
    from diversed.verify import DynamicEnsemble

    return DynamicEnsemble(heads[point["head"]])


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        # the time baseline: the target alone on the engine's own forward path (autoregressive.py)
        Method("autoregressive", "Autoregressive", speculative=False, decoder="autoregressive"),
        # a reference: transformers' `generate` with the target alone (another forward path)
        Method("hf_generate", "transformers generate", speculative=False, decoder="transformers"),
        Method("lossless", "Lossless SD", speculative=True, verifier=_lossless),
        Method("static", "Static w={weight:g}", speculative=True, knobs=("weight",), sweep="weights", verifier=_static),
        Method("dynamic", "DIVERSED ({head})", speculative=True, knobs=("head",), sweep="heads", verifier=_dynamic),
    )
}
METHOD_NAMES = tuple(METHODS)  # also the order of rows in tables
KNOB_FIELDS = tuple(dict.fromkeys(k for m in METHODS.values() for k in m.knobs))


def method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {METHOD_NAMES}")
    return METHODS[name]


def check_record_fields(fields: Mapping[str, Any], missing: Callable[[Any], bool]) -> None:
    """ValueError unless `fields["method"]` is known, each knob field is set exactly for the method
    that has it, and non-speculative methods have no `num_draft_tokens`."""
    name = fields.get("method")
    if name not in METHODS:
        raise ValueError(f"method must be one of {METHOD_NAMES}, got {name!r}")
    m = METHODS[name]
    for knob in KNOB_FIELDS:
        owners = [o.name for o in METHODS.values() if knob in o.knobs]
        if missing(fields.get(knob)) == (knob in m.knobs):
            raise ValueError(f"`{knob}` is set for method {' and '.join(map(repr, owners))} and only for it")
    if not m.speculative and not missing(fields.get("num_draft_tokens")):
        raise ValueError(f"{name} decoding has no `num_draft_tokens`")
