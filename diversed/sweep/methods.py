"""The method registry: every decoding method a sweep compares, each one object that knows its knobs.

A `Knob` is one setting a method is swept over: the record field that holds it (`weight`), the
`sweep.<key>` that lists its values (`sweep.weights`), its symbol in labels, legends and tables
(w), its type and range (w in [0, 1]; a cascade's rule one of chow, diff, opt), what it is in words,
and its default grid; `canonical_float` is the one form in which a number setting (a knob's value,
the temperature) is keyed and compared. A `Method` has a name (the `method` field of a results
record), a label for tables and legends, whether it is speculative (it has a draft length N and an
acceptance rate), which decoding loop runs it (the engine, our autoregressive loop, or transformers'
own), its knobs, the knob drawn as a line (its family), and how to build its verifier for a grid
point (on our autoregressive loop, a verifier without a draft gives the law each token is drawn
from).

Everything else derives from the registered methods: the settings schema validates each knob's
`sweep.<key>` (`settings.py`), `evaluate` expands its grid from the knobs' lists, `results` writes,
keys and checks each knob's record field, and `fronts`, `plot`, `tables` and `report` group, order
and label rows by the methods' knobs and families. A new method is one `register(Method(...))`,
in the package (the built-ins below) or in a module of one's own, loaded by `plugins=[module]` on any
entry point's command line (`plugins.py`) or an entry point of the `diversed.methods` group (README,
"Add your own method").

A knob whose values are paths (`path=True`: a head, a fine-tuned draft, a plugin's own file) says what
its files are and how a sweep checks, digests and loads them (`Files`): the sweep checks and loads
through the knobs of the methods it runs, never by a method's name, so a method of one's own that
reuses `HEAD` gets its head points as `dynamic` does.

It does not import torch or the models at import time (results and plots read it without them: a
knob's check and load functions are named as "module:function" and imported when a sweep needs
them), and it knows nothing of the settings schema or the results files: they read it.
"""

from __future__ import annotations

import importlib
import math
import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from diversed.config.entry_points import load_group
from diversed.errors import ConfigError

ENTRY_POINT_GROUP = "diversed.methods"
DECODERS = ("engine", "autoregressive", "transformers")
KNOB_TYPES = (float, int, str)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # method names, record fields and sweep keys
_INTERVAL = re.compile(r"\s*([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])\s*")


# ----------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Files:
    """What the values of a path knob are and how a sweep checks, digests and loads them. Each
    function is a callable or named as "module:function" (imported when a sweep needs it: this module
    stays free of torch); a knob of one's own with `path=True` and no `Files` gets the defaults: each path
    must exist (checked before any weights load), its files are digested into its points' settings
    under the knob's field, and the verifier receives the path itself.

    settings        the key of a value's digest in its points' settings ("head", "draft"; "": the
                    knob's field); a record's settings fingerprint, hence its key, holds it
    check           (card, paths, sweep, knob) -> {path: digest}: every path checked against the
                    pair's card (None: no pair files) before any weights load; ConfigError naming the
                    path and the fix
    load            (paths, pair) -> {path: loaded object}, after the pair loads; "": the path itself
    replaces_draft  the loaded object decodes as the pair's draft (a fine-tuned draft)
    record          (path, digest) -> record fields of the points that take it ("": none)
    """

    settings: str = ""
    check: str | Callable[..., Any] = "diversed.sweep.preflight:check_paths"
    load: str | Callable[..., Any] = ""
    replaces_draft: bool = False
    record: str | Callable[..., Any] = ""

    def __post_init__(self) -> None:
        if not self.check:
            raise ValueError(
                "Files.check: a path knob's values are checked before any weights load; leave it out for "
                "the default (each path exists, its files digested)"
            )
        for what in ("check", "load", "record"):
            ref = getattr(self, what)
            if ref and not callable(ref) and not (isinstance(ref, str) and re.fullmatch(r"[\w.]+:\w+", ref)):
                raise ValueError(f'Files.{what} {ref!r}: give a callable or name one as "module:function"')

    @staticmethod
    def function(ref: str | Callable[..., Any]) -> Callable[..., Any]:
        """The function `ref` is: itself, or the one named "module:function" (imported now)."""
        if callable(ref):
            return ref
        module, _, name = ref.partition(":")
        return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Knob:
    """One setting a method is swept over; its values are checked against `type` and `interval` or
    `choices` before anything loads (`settings.py`) and again when records are read (`results.py`).

    field      the record field holding the value, e.g. "weight" (also the grid point's key)
    sweep      the `sweep.<key>` listing its values, e.g. "weights"
    symbol     its name in labels, legends and tables, e.g. "w"
    type       float, int or str
    interval   numbers: where they lie, "[0, 1]", "(0, 1]", "[0, inf)"; None: anywhere (finite)
    choices    str knobs: the values it may take (empty: any)
    label      what it is, in words (the settings' errors, the README)
    default    the default grid: the values swept when the config does not list them
    path       a file or directory (a head, a draft): shown by its last two path parts, and
               checked, digested and loaded as `files` says
    files      a path knob's `Files` (default: `Files()` with the knob's field as its settings key)
    """

    field: str
    sweep: str
    symbol: str
    type: type = float
    interval: str | None = None
    choices: tuple[str, ...] = ()
    label: str = ""
    default: tuple[Any, ...] = ()
    path: bool = False
    files: Files | None = None

    def __post_init__(self) -> None:
        for what, name in (("field", self.field), ("sweep", self.sweep)):
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(
                    f"Knob {what} {name!r}: use letters, digits and _ (a record field, a sweep.<key>)"
                )
        if self.type not in KNOB_TYPES:
            raise ValueError(f"Knob {self.field}: type must be one of float, int, str, got {self.type!r}")
        if self.interval is not None and self.type is str:
            raise ValueError(f"Knob {self.field}: a str knob has choices, not an interval")
        if self.choices and self.type is not str:
            raise ValueError(f"Knob {self.field}: choices are for str knobs; numbers take an interval")
        _ = self.bounds  # parses the interval: a malformed one fails here
        if self.files is not None and not self.path:
            raise ValueError(f"Knob {self.field}: files are for a knob whose values are paths (path=True)")
        if self.path:
            files = self.files or Files()
            object.__setattr__(self, "files", replace(files, settings=files.settings or self.field))
        object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "default", tuple(self.default))
        for value in self.default:
            if why := self.problem(value):
                raise ValueError(f"Knob {self.field}: its default grid has {value!r}, which {why}")

    @cached_property
    def bounds(self) -> tuple[float, float, bool, bool]:
        """(low, high, low end included, high end included) of a number knob (parsed once: readers
        check every record's value against it)."""
        if self.interval is None:
            return -math.inf, math.inf, False, False
        m = _INTERVAL.fullmatch(self.interval)
        try:
            low, high = float(m[2]), float(m[3])  # type: ignore[index]
        except (TypeError, ValueError):
            raise ValueError(
                f'Knob {self.field}: interval {self.interval!r} is not like "[0, 1]", "(0, 1]" or "[0, inf)"'
            ) from None
        if not low <= high:
            raise ValueError(f"Knob {self.field}: interval {self.interval!r} is empty")
        return low, high, m[1] == "[", m[4] == "]"  # type: ignore[index]

    @property
    def allowed(self) -> str:
        """The values it takes, in words: "in (0, 1]", "one of chow, diff, opt"."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        if self.type is str:
            return "a string"
        kind = "an integer" if self.type is int else "a number"
        return f"{kind} in {self.interval}" if self.interval else f"a finite {kind.split()[-1]}"

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this knob's (None: it can): "is not in (0, 1]"."""
        if self.type is str:
            if not isinstance(value, str):
                return f"is not a string ({self.allowed})"
            return None if not self.choices or value in self.choices else f"is not {self.allowed}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"is not a number ({self.allowed})"
        if self.type is int and not float(value).is_integer():
            return f"is not an integer ({self.allowed})"
        low, high, closed_low, closed_high = self.bounds
        inside = (low <= value if closed_low else low < value) and (
            value <= high if closed_high else value < high
        )
        return None if math.isfinite(value) and inside else f"is not {self.allowed}"

    def check(self, value: Any) -> Any:
        """`value`, or ValueError naming the knob and its range (the schema's per-value check)."""
        if self.problem(value):
            raise ValueError(
                f"{self.symbol}{f' ({self.label})' if self.label else ''} must be {self.allowed}"
            )
        return value

    def show(self, value: Any) -> str:
        """A value as labels write it: numbers with :g, paths by their last two parts."""
        if self.path:
            return head_label(value)
        return f"{value:g}" if isinstance(value, float) else str(value)


def canonical_float(value: Any) -> float:
    """A number setting (T, w, another knob's) as keys, records and pairings compare it: to 6
    decimals (0.5 is 0.50000000001), and to 6 significant digits below 0.1, so that T = 1e-8 (which
    samples) is not T = 0 (greedy); -0.0 is 0.0. A value written with 6 decimals or fewer, and any
    value of 0.1 or more, is what rounding to 6 decimals made of it, as older keys hold."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return value + 0.0
    return round(value, max(6, 5 - math.floor(math.log10(abs(value))))) + 0.0


# ----------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Method:
    """A decoding method (see the module docstring).

    name         the records' `method`, e.g. "static"
    label        table row / legend label, a format string of its knobs' fields: "Static w={weight:g}"
    speculative  has num_draft_tokens and an acceptance rate
    decoder      engine (speculative_generate) | autoregressive (our loop) | transformers
    knobs        its `Knob`s: record fields set for this method and only for it; its grid is the
                 product of their `sweep.<key>` lists
    verifier     (point, loaded) -> the engine's `Verifier` for a grid point: `point` maps each knob's
                 field to its value (and method, temperature, num_draft_tokens); `loaded` what its path
                 knobs' values loaded as, by path (`Files.load`: `dynamic` reads
                 loaded[point["head"]], its head). On the autoregressive decoder (no draft) each token
                 is drawn from its bonus law given p (`autoregressive_generate`)
    family       the field of the knob drawn as a line (a front) and chosen per table; the other
                 knobs name the line
    batch_one    decoded one example at a time whatever sweep.batch_size (transformers' assisted)
    valid        which knob combinations exist for it (point -> bool); None: all
    summary      what the method is, in one sentence (README, legends)
    row          the report's row name (default: the label without its knobs, `name_only`)
    marker, line how plots draw it (matplotlib marker; line style of a family's line)
    """

    name: str
    label: str
    speculative: bool = True
    decoder: str = "engine"
    knobs: tuple[Knob, ...] = ()
    verifier: Callable[[Mapping[str, Any], Mapping[str, Any]], Any] | None = None
    family: str | None = None
    batch_one: bool = False
    valid: Callable[[Mapping[str, Any]], bool] | None = None
    summary: str = ""
    row: str | None = None
    marker: str = "o"
    line: Any = "-"

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", tuple(self.knobs))
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"method name {self.name!r}: use letters, digits and _ (it is the records' `method`)"
            )
        if self.decoder not in DECODERS:
            raise ValueError(f"method {self.name}: decoder must be one of {DECODERS}, got {self.decoder!r}")
        if not all(isinstance(k, Knob) for k in self.knobs):
            raise ValueError(f"method {self.name}: knobs must be Knob objects (diversed.sweep.methods.Knob)")
        if len(set(self.fields)) < len(self.fields) or len({k.sweep for k in self.knobs}) < len(self.knobs):
            raise ValueError(f"method {self.name}: two knobs share a field or a sweep key")
        if self.decoder == "engine" and self.verifier is None:
            raise ValueError(
                f"method {self.name} runs on the engine: give it verifier=(point, loaded) -> Verifier"
            )
        if self.knobs and not self.speculative and not (self.decoder == "autoregressive" and self.verifier):
            raise ValueError(
                f"method {self.name}: a non-speculative method's knobs set the law our autoregressive loop "
                "draws from: give it decoder='autoregressive' and verifier=(point, loaded) -> Verifier"
            )
        if self.family is not None and self.family not in self.fields:
            raise ValueError(
                f"method {self.name}: family {self.family!r} is not one of its knobs' fields {self.fields}"
            )
        named = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(self.label) if f}
        if named - set(self.fields):
            raise ValueError(
                f"method {self.name}: its label {self.label!r} names {sorted(named - set(self.fields))}, "
                f"which are not its knobs' fields {self.fields}"
            )

    @property
    def fields(self) -> tuple[str, ...]:
        """The record fields of its knobs, in order."""
        return tuple(k.field for k in self.knobs)

    def knob(self, field: str) -> Knob:
        return next(k for k in self.knobs if k.field == field)

    def describe(self, record: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> str:
        """The label of one record, e.g. "Static w=0.5"; a path by its label in `labels` where it has one
        (`head_labels` of a table's paths), else `head_label`."""
        values = {k.field: record.get(k.field) for k in self.knobs}
        for k in self.knobs:
            if k.path and values[k.field] is not None:
                values[k.field] = (labels or {}).get(str(values[k.field])) or head_label(values[k.field])
        return self.label.format(**values)

    @property
    def name_only(self) -> str:
        """The label without its knobs: "Static w={weight:g}" -> "Static" (legends of several settings)."""
        words = self.label.split()
        return " ".join(words[: next((i for i, w in enumerate(words) if set(w) & set("{=(")), len(words))])

    @property
    def row_name(self) -> str:
        """The report's row name: `row`, else `name_only`."""
        return self.row or self.name_only


# the file suffixes a label drops (a weights or config file); any other dot is the name's own: a model
# directory `Qwen2.5-Coder-0.5B` or a head `lam0.5` keeps its number
MODEL_FILE_SUFFIXES = frozenset({".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".gguf", ".json", ".onnx"})


def head_label(head: Any, parts: int = 2) -> str:
    """A short name for a head or model path: its last `parts` path parts, a weights file's suffix
    (`MODEL_FILE_SUFFIXES`) dropped."""
    path = Path(str(head))
    names = (path.with_suffix("") if path.suffix.lower() in MODEL_FILE_SUFFIXES else path).parts
    return "/".join(names[-parts:]) if names else str(head)


def head_labels(heads: Iterable[Any]) -> dict[str, str]:
    """Each distinct path of `heads` (by `str`) with a label no other of them has: `head_label`, its tail
    lengthened one part at a time while two of them would read the same (`runs/a/train_mbpp/head` and
    `runs/b/train_mbpp/head` are `a/train_mbpp/head` and `b/train_mbpp/head`, never one row), the path
    itself where even whole paths read the same (`runs/h.pt` and `runs/h.gguf`)."""
    paths = list(dict.fromkeys(str(h) for h in heads))

    def clash(path: str, n: int) -> bool:
        return any(o != path and head_label(o, n) == head_label(path, n) for o in paths)

    labels = {}
    for path in paths:
        n, longest = 2, len(Path(path).parts)
        while n < longest and clash(path, n):
            n += 1
        # whole paths that read alike without their file suffixes (runs/h.pt, runs/h.gguf): the paths
        labels[path] = path if clash(path, n) else head_label(path, n)
    return labels


# ----------------------------------------------------------------------------- the registry

METHODS: dict[str, Method] = {}  # by name, in registration order: the order of rows in tables
_on_register: list[Callable[[], None]] = []


def register(method: Method, *, replace: bool = False) -> Method:
    """Add `method` to the registry (returns it). Its knobs must agree with those already registered: a
    field or sweep key that another method has is the same `Knob` (e.g. the static ensembles' w). A
    name that is taken is refused unless `replace`, or unless the method is the same but for its
    functions (its module imported again)."""
    if not isinstance(method, Method):
        raise TypeError(f"register takes a diversed.sweep.methods.Method, got {type(method).__name__}")
    old = METHODS.get(method.name)
    same = old is not None and _shape(old) == _shape(method)
    if old is not None and not (replace or same):
        raise ValueError(
            f"a method named {method.name!r} is registered already ({old.label!r}): choose another "
            "name, or register(..., replace=True) to replace it"
        )
    for k in method.knobs:
        for other in (o for name, m in METHODS.items() if name != method.name for o in m.knobs):
            if (other.field == k.field or other.sweep == k.sweep) and other != k:
                raise ValueError(
                    f"method {method.name}: knob {k.field} (sweep.{k.sweep}) clashes with the registered "
                    f"knob {other.field} (sweep.{other.sweep}) of another method: use that very Knob, "
                    "or another field and sweep key"
                )
    METHODS[method.name] = method
    for hook in _on_register:
        hook()
    return method


def unregister(name: str) -> Method | None:
    """Remove the method `name` from the registry (a notebook's experiment undone); returns it, or None."""
    removed = METHODS.pop(name, None)
    for hook in _on_register:
        hook()
    return removed


def _shape(m: Method) -> tuple:
    return m.name, m.label, m.speculative, m.decoder, m.knobs, m.family, m.batch_one


def on_register(hook: Callable[[], None]) -> None:
    """Call `hook()` after every registration and removal (the settings layer refreshes what derives from
    the knobs)."""
    _on_register.append(hook)


def names() -> tuple[str, ...]:
    """The registered methods' names, in registration order (the order of rows in tables)."""
    return tuple(METHODS)


_knobs_of: tuple[tuple[Method, ...], dict[str, Knob]] = ((), {})  # knobs() of the registry as it was


def knobs() -> dict[str, Knob]:
    """Every registered knob by its record field, in the order the methods first name them (made again
    only when the registry changed: readers ask once per record)."""
    global _knobs_of
    registry = tuple(METHODS.values())
    if registry != _knobs_of[0]:
        out: dict[str, Knob] = {}
        for m in registry:
            for k in m.knobs:
                out.setdefault(k.field, k)
        _knobs_of = (registry, out)
    return dict(_knobs_of[1])


_FIX = (
    "load the module that registers it: plugins=[my_pkg.my_method] on the command line (evaluate, "
    "report, plot, show, ...; in a config `plugins: [my_pkg.my_method]`), or "
    "diversed.load_plugins(['my_pkg.my_method']) in Python (README, \"Add your own method\")"
)


def method(name: str) -> Method:
    """The registered method `name`; ConfigError naming the registered ones and how to load another."""
    if name not in METHODS:
        load_entry_points()
    if name not in METHODS:
        raise ConfigError(
            f"unknown method {name!r}; registered: {', '.join(METHODS)}. A method of your own: {_FIX}"
        )
    return METHODS[name]


def check_known(found: Iterable[Any], where: str) -> None:
    """ConfigError if `found` (the records' method names) holds one that is not registered, saying how
    to load the module that registers it (methods of the `diversed.methods` entry points are
    loaded first)."""
    unknown = sorted({str(n) for n in found if n not in METHODS})
    if unknown:
        load_entry_points()
        unknown = [n for n in unknown if n not in METHODS]
    if unknown:
        raise ConfigError(
            f"{where} has records of {', '.join(map(repr, unknown))}, which no registered method is "
            f"(registered: {', '.join(METHODS)}): {_FIX}"
        )


def check_record_fields(fields: Mapping[str, Any], missing: Callable[[Any], bool]) -> None:
    """ValueError unless `fields["method"]` is registered, each knob field is set exactly for the method
    that has it (and holds one of its values), and non-speculative methods have no `num_draft_tokens`."""
    m = method(fields.get("method"))  # type: ignore[arg-type]
    for field, knob in knobs().items():
        owners = [o.name for o in METHODS.values() if field in o.fields]
        if missing(fields.get(field)) == (field in m.fields):
            raise ValueError(f"`{field}` is set for method {' and '.join(map(repr, owners))} and only for it")
        if not missing(fields.get(field)) and (why := knob.problem(fields[field])):
            raise ValueError(f"`{field}`={fields[field]!r} {why}")
    if not m.speculative and not missing(fields.get("num_draft_tokens")):
        raise ValueError(f"{m.name} decoding has no `num_draft_tokens`")


# ----------------------------------------------------------------------------- plugins

_entry_points_loaded = False


def load_entry_points() -> None:
    """Load the `diversed.methods` entry points once: each names a module (which registers its
    methods on import) or a `Method` (registered here)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for found in load_group(ENTRY_POINT_GROUP):
        if isinstance(found, Method) and METHODS.get(found.name) is not found:
            register(found)


# ----------------------------------------------------------------------------- the built-in methods


def _lossless(point, loaded):
    from diversed.decoding.verify import Lossless  # torch-free at import: results and plots read it

    return Lossless()


def _static(point, loaded):
    from diversed.decoding.verify import StaticEnsemble  # torch-free at import: results and plots read it

    return StaticEnsemble(point["weight"])


def _dynamic(point, loaded):
    from diversed.decoding.verify import DynamicEnsemble  # torch-free at import: results and plots read it

    return DynamicEnsemble(loaded[point["head"]])


def _lossy(point, loaded):
    from diversed.decoding.rules import LossySD  # torch-free at import: results and plots read it

    return LossySD(point["lenience"])


def _cascade(point, loaded):
    from diversed.decoding.rules import Cascade  # torch-free at import: results and plots read it

    return Cascade(point["cascade_rule"], point["cascade_alpha"])


def _typical(point, loaded):
    from diversed.decoding.rules import TypicalAcceptance  # torch-free at import: results and plots read it

    return TypicalAcceptance(point["typical_epsilon"], point["typical_delta"])


WEIGHT = Knob(
    "weight",
    "weights",
    "w",
    interval="[0, 1]",
    label="the weight on the target in v = w·p + (1 − w)·q",
    default=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)
HEAD = Knob(
    "head",
    "heads",
    "head",
    type=str,
    path=True,
    label="a trained weighting head: its save_pretrained directory",
    files=Files(
        settings="head",
        check="diversed.sweep.preflight:check_heads",
        load="diversed.sweep.point:load_heads",
        record="diversed.sweep.preflight:head_fields",
    ),
)
DRAFT_MODEL = Knob(
    "draft_model",
    "draft_models",
    "draft",
    type=str,
    path=True,
    label="a fine-tuned draft: a directory of python -m diversed.distill",
    files=Files(
        settings="draft",
        check="diversed.sweep.preflight:check_drafts",
        load="diversed.sweep.point:load_drafts",
        replaces_draft=True,
    ),
)
LENIENCE = Knob(
    "lenience",
    "lenience",
    "l",
    interval="(0, 1]",
    label="lossy SD's lenience, 1 = lossless",
    default=(0.1, 0.3, 0.5, 0.7, 0.9),
)
CASCADE_RULE = Knob(
    "cascade_rule",
    "cascade_rules",
    "rule",
    type=str,
    choices=("chow", "diff", "opt"),
    label="a cascade's deferral rule",
    default=("chow", "diff", "opt"),
)
CASCADE_ALPHA = Knob(
    "cascade_alpha",
    "cascade_alphas",
    "α",
    interval="[0, inf)",
    label="a cascade's threshold",
    default=(0.1, 0.3, 0.5),
)
TYPICAL_EPSILON = Knob(
    "typical_epsilon",
    "typical_epsilons",
    "ε",
    interval="(0, 1]",
    label="typical acceptance's cap on the threshold",
    default=(0.01, 0.05, 0.09, 0.3),
)
TYPICAL_DELTA = Knob(
    "typical_delta",
    "typical_deltas",
    "δ",
    interval="(0, 1]",
    label="typical acceptance's entropy scale",
    default=(0.3,),
)

for _method in (
    Method(
        "autoregressive",
        "Autoregressive",
        speculative=False,
        decoder="autoregressive",
        summary="the target alone, one token per step on the engine's own forward path: the time baseline",
    ),
    Method(
        "hf_generate",
        "transformers generate",
        speculative=False,
        decoder="transformers",
        marker="P",
        summary="the target alone through transformers' `generate` (another forward path): a reference",
    ),
    Method(
        "lossless",
        "Lossless SD",
        speculative=True,
        verifier=_lossless,
        row="SD (lossless)",
        marker="s",
        summary="standard speculative decoding: accept with min(1, p/q), output distributed as the target",
    ),
    Method(
        "finetuned_draft",
        "SD, fine-tuned draft ({draft_model})",
        speculative=True,
        verifier=_lossless,
        knobs=(DRAFT_MODEL,),
        marker="D",
        summary="lossless SD with a draft distilled towards the target (`python -m diversed.distill`)",
    ),
    Method(
        "static",
        "Static w={weight:g}",
        speculative=True,
        knobs=(WEIGHT,),
        verifier=_static,
        family="weight",
        summary="the static ensemble: verify against v = w·p + (1 − w)·q with one w everywhere",
    ),
    Method(
        "hf_static",
        "transformers static w={weight:g}",
        speculative=True,
        decoder="transformers",
        knobs=(WEIGHT,),
        family="weight",
        batch_one=True,
        valid=lambda point: 0.0 < point["weight"] < 1.0,
        marker="h",
        line=(0, (1, 1)),
        summary=(
            "transformers' own static ensemble (`assistant_ensemble_weight`, batch 1): an outside reference"
        ),
    ),
    Method(
        "lossy",
        "Lossy SD l={lenience:g}",
        speculative=True,
        knobs=(LENIENCE,),
        verifier=_lossy,
        family="lenience",
        marker="^",
        line="--",
        summary="Leviathan et al.'s lenience: accept with min(1, p/(l·q)), residual max(0, p − l·q)",
    ),
    Method(
        "cascade",
        "Cascade {cascade_rule} α={cascade_alpha:g}",
        speculative=True,
        knobs=(CASCADE_RULE, CASCADE_ALPHA),
        verifier=_cascade,
        family="cascade_alpha",
        marker="v",
        line=":",
        summary="token-level speculative cascades: a deferral rule picks p or q per position, SD against it",
    ),
    Method(
        "typical",
        "Typical ε={typical_epsilon:g} δ={typical_delta:g}",
        speculative=True,
        knobs=(TYPICAL_EPSILON, TYPICAL_DELTA),
        verifier=_typical,
        family="typical_epsilon",
        marker="d",
        line="-.",
        summary="Medusa's typical acceptance: accept x if p(x) > min(ε, δ·exp(−H(p)))",
    ),
    Method(
        "autoregressive_typical",
        "Autoregressive, typical ε={typical_epsilon:g} δ={typical_delta:g}",
        speculative=False,
        decoder="autoregressive",
        knobs=(TYPICAL_EPSILON, TYPICAL_DELTA),
        verifier=_typical,  # without a draft: every token from its bonus law, typical(p)
        family="typical_epsilon",
        row="Autoregressive, typical-truncated p",
        marker="X",
        line=(0, (3, 1, 1, 1, 1, 1)),
        summary=(
            "the target alone, each token from p truncated as typical acceptance truncates it (the tokens "
            "with p(x) ≥ min(ε, δ·exp(−H(p))), renormalised): typical acceptance's quality from the "
            "truncation alone"
        ),
    ),
    Method(
        "dynamic",
        "DIVERSED ({head})",
        speculative=True,
        knobs=(HEAD,),
        verifier=_dynamic,
        marker="*",
        summary="a learned, context-dependent w from both models' hidden states",
    ),
):
    register(_method)
del _method


def exact_law(record: Mapping[str, Any]) -> bool:
    """Whether a record's outputs are drawn exactly from the target's law, as autoregressive decoding's
    (sampling error apart, the same output distribution): the target alone (autoregressive, hf_generate),
    lossless verification (lossless, a fine-tuned draft), the static ensemble at w = 1 (v = p), lossy SD
    at l = 1 (accept min(1, p/q), residual max(0, p − q): `rules.LossySD`); greedy (T = 0) also lossy SD
    and typical acceptance at any setting, whose greedy rules accept while x = argmax p and then emit
    argmax p (`rules.py`). Cascades (w ∈ {0, 1} by a deferral rule) and DIVERSED are not; a method of
    one's own: not known, False."""
    name, greedy = record.get("method"), record.get("temperature") == 0
    if name in ("autoregressive", "hf_generate", "lossless", "finetuned_draft"):
        return True
    if name == "static":
        return record.get("weight") == 1
    if name == "lossy":
        return greedy or record.get("lenience") == 1
    return bool(greedy and name in ("typical", "autoregressive_typical"))
