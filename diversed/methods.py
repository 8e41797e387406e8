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
    sweeps: tuple[str, ...] = ()  # per knob, the sweep config key listing its values (grid: their product)
    verifier: Callable[[Mapping[str, Any], Mapping[str, Any]], Any] | None = None  # (point, heads) -> Verifier
    family: str | None = None  # the knob drawn as a line (a front); the other knobs name the line
    batch_one: bool = False  # decoded one example at a time whatever sweep.batch_size (transformers' assisted)
    valid: Callable[[Mapping[str, Any]], bool] | None = None  # which knob values exist for it
    summary: str = ""  # what the method is, in one sentence (README, legends)

    def describe(self, record: Mapping[str, Any]) -> str:
        """The label of one record, e.g. "Static w=0.5"."""
        values = {k: record.get(k) for k in self.knobs}
        for k in ("head", "draft_model"):
            if values.get(k) is not None:
                values[k] = head_label(values[k])
        return self.label.format(**values)

    @property
    def name_only(self) -> str:
        """The label without its knobs: "Static w={weight:g}" -> "Static" (legends of several settings)."""
        words = self.label.split()
        return " ".join(words[: next((i for i, w in enumerate(words) if set(w) & set("{=(")), len(words))])


def head_label(head: Any) -> str:
    """A short name for a head or model path: its last two path parts without the suffix."""
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


def _lossy(point, heads):
    from diversed.rules import LossySD

    return LossySD(point["lenience"])


def _cascade(point, heads):
    from diversed.rules import Cascade

    return Cascade(point["cascade_rule"], point["cascade_alpha"])


def _typical(point, heads):
    from diversed.rules import TypicalAcceptance

    return TypicalAcceptance(point["typical_epsilon"], point["typical_delta"])


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("autoregressive", "Autoregressive", speculative=False, decoder="autoregressive",
               summary="the target alone, one token per step on the engine's own forward path: the time baseline"),
        Method("hf_generate", "transformers generate", speculative=False, decoder="transformers",
               summary="the target alone through transformers' `generate` (another forward path): a reference"),
        Method("lossless", "Lossless SD", speculative=True, verifier=_lossless,
               summary="standard speculative decoding: accept with min(1, p/q), output distributed as the target"),
        Method("finetuned_draft", "SD, fine-tuned draft ({draft_model})", speculative=True, verifier=_lossless,
               knobs=("draft_model",), sweeps=("draft_models",),
               summary="lossless SD with a draft distilled towards the target (`python -m diversed.distill`)"),
        Method("static", "Static w={weight:g}", speculative=True, knobs=("weight",), sweeps=("weights",),
               verifier=_static, family="weight",
               summary="the static ensemble: verify against v = w·p + (1 − w)·q with one w everywhere"),
        Method("hf_static", "transformers static w={weight:g}", speculative=True, decoder="transformers",
               knobs=("weight",), sweeps=("weights",), family="weight", batch_one=True,
               valid=lambda point: 0.0 < point["weight"] < 1.0,
               summary="transformers' own static ensemble (`assistant_ensemble_weight`, batch 1): an outside reference"),
        Method("lossy", "Lossy SD l={lenience:g}", speculative=True, knobs=("lenience",), sweeps=("lenience",),
               verifier=_lossy, family="lenience",
               summary="Leviathan et al.'s lenience: accept with min(1, p/(l·q)), residual max(0, p − l·q)"),
        Method("cascade", "Cascade {cascade_rule} α={cascade_alpha:g}", speculative=True,
               knobs=("cascade_rule", "cascade_alpha"), sweeps=("cascade_rules", "cascade_alphas"),
               verifier=_cascade, family="cascade_alpha",
               summary="token-level speculative cascades: a deferral rule picks p or q per position, SD against it"),
        Method("typical", "Typical ε={typical_epsilon:g} δ={typical_delta:g}", speculative=True,
               knobs=("typical_epsilon", "typical_delta"), sweeps=("typical_epsilons", "typical_deltas"),
               verifier=_typical, family="typical_epsilon",
               summary="Medusa's typical acceptance: accept x if p(x) > min(ε, δ·exp(−H(p)))"),
        Method("dynamic", "DIVERSED ({head})", speculative=True, knobs=("head",), sweeps=("heads",),
               verifier=_dynamic, summary="a learned, context-dependent w from both models' hidden states"),
    )
}  # fmt: skip
METHOD_NAMES = tuple(METHODS)  # also the order of rows in tables
KNOB_FIELDS = tuple(dict.fromkeys(k for m in METHODS.values() for k in m.knobs))


def method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {METHOD_NAMES}")
    return METHODS[name]


FLOAT_KNOBS = ("weight", "lenience", "cascade_alpha", "typical_epsilon", "typical_delta")


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
