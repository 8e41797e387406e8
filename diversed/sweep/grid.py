"""A sweep's grid and its keys: the points (methods × knobs × N × T, each method's knobs from
`sweep.methods`), the verifier of a point, and the settings that key a point's records (task settings
and prompts, the pair's identity, engine options, batch size, seed; a path knob's files, a head's or a
draft's, are added per point by `resources.Resources.settings`). `diversed.evaluate` runs the points;
this module decodes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from diversed.decoding.verify import Verifier
from diversed.files.provenance import digest, task_settings
from diversed.sweep.methods import METHODS
from diversed.sweep.preflight import describe
from diversed.tasks.base import Task

# engine options added after the first records, and their values that behave as before they existed
LATER_ENGINE_OPTIONS = {"first_token": ("ensemble",), "top_k": (0, None), "top_p": (1.0,)}

# What says which examples a run scored: left out of the comparison group (see evaluate).
WHICH_EXAMPLES = (
    "split",
    "n_examples",
    "n_loaded",
    "examples",
    "prompts",
    "selection",
    "data_files",
    "seed",
    "skip_examples",
)


def grid(
    sweep: DictConfig | Mapping[str, Any], checked: Mapping[str, Iterable[str]] | None = None
) -> Iterator[dict[str, Any]]:
    """Grid points in run order: per temperature, the non-speculative methods first (in the registry's
    order), then per N each speculative method; each at each combination of its knobs' values
    (`sweep.<key>` per knob, its default grid where the config has none; a path knob's values as
    checked, `checked[field]`, `resources.Resources.paths`, and none that were not checked), skipping
    combinations the method does not have."""
    import itertools

    checked = checked or {}
    methods = [m for m in METHODS if m in set(sweep["methods"])]

    def points(name: str, base: dict[str, Any]) -> Iterator[dict[str, Any]]:
        m = METHODS[name]
        values = [
            list(checked.get(k.field, ())) if k.path else list(sweep.get(k.sweep, k.default)) for k in m.knobs
        ]
        for combination in itertools.product(*values):
            point = {"method": name, **dict(zip(m.fields, combination, strict=True)), **base}
            if m.valid is None or m.valid(point):
                yield point

    for temperature in sweep["temperatures"]:
        for name in methods:
            if not METHODS[name].speculative:
                yield from points(name, {"temperature": float(temperature)})
        for n in sweep["draft_lengths"]:
            for name in methods:
                if METHODS[name].speculative:
                    yield from points(name, {"temperature": float(temperature), "num_draft_tokens": int(n)})


def make_verifier(point: dict[str, Any], loaded: Mapping[str, Any]) -> Verifier | None:
    """The engine's verifier for a grid point (None: a method without one, e.g. autoregressive);
    `loaded`: the path knobs' values loaded, by path (`resources.load_resources`)."""
    build = METHODS[point["method"]].verifier
    return None if build is None else build(point, loaded)


def engine_settings(engine: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The engine options of a fingerprint: a later option at its old behaviour is left out, so
    points from before it keep their keys (and their run directories resume)."""
    engine = OmegaConf.to_container(engine, resolve=True) if isinstance(engine, DictConfig) else dict(engine)
    return {
        k: v for k, v in engine.items() if not (k in LATER_ENGINE_OPTIONS and v in LATER_ENGINE_OPTIONS[k])
    }


def settings_fingerprint(cfg: DictConfig, task: Task, card: Any) -> dict[str, Any]:
    """Everything that determines a grid point's output, but the point itself and its head."""
    pair = describe(card) or {"config": OmegaConf.to_container(cfg.pair, resolve=True)}
    return {
        "task": task_settings(task),
        "pair": pair,
        "engine": engine_settings(cfg.engine),
        "batch_size": int(cfg.sweep.batch_size),
        # the batches' composition changes outputs; named only when set (older fingerprints unchanged)
        **({"batch_by_length": True} if cfg.sweep.get("batch_by_length", False) else {}),
        # a prompt cache reads each prompt in a pass of its own (other rounding); named only when set
        **({"prompt_pass": "separate"} if cfg.sweep.get("prompt_cache_gb", 0) else {}),
        "seed": int(cfg.seed),
    }


def comparison_group(common: dict[str, Any]) -> str:
    """Digest of the settings without the seed and without which examples were scored: records of one
    protocol on its validation and its test split share it."""
    task = {k: v for k, v in common["task"].items() if k not in WHICH_EXAMPLES}
    return digest({**{k: v for k, v in common.items() if k != "seed"}, "task": task})
