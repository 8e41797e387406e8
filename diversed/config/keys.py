"""Which keys a composed config may hold, and the refusal of every other one (with the closest known key).

Hydra refuses `sweep.weight=[0.9]` (no such key) but accepts `+sweep.weight=[0.9]`, which its own
hint suggests: the key would then be carried along and ignored. `unknown_keys(cfg, fields)` lists
every key of a composed config that nothing reads, each with the closest known key (difflib), so
that `schema.check_settings` refuses it with the other bad settings, before anything loads. What a node knows:

- a node with a `_target_` (task, pair, data module, model, head, logger, callbacks, trainer,
  optimizer): the target's parameters (its signature), since Hydra passes every key to it; a target
  that takes `**kwargs` accepts anything, unless the schema describes the node (the head: then the
  schema's fields, our yaml's keys and the named parameters); a target that says which keys it reads
  (`reads_keys`: `tasks.load_task`, whose keys are the chosen task's options) is asked;
- any other node (sweep, engine, timing, runtime, and the sections of another entry point, which a
  preset such as `+experiment=toy` holds for all of them): the schema's fields there, plus what our
  own yaml files define there (the entry points' configs and the config groups' files);
- the top level: every entry point's sections, the config groups and the primary configs' keys;
  `logger` and `callbacks` are collections (any name, each entry checked by its `_target_`);
  `paths` (a namespace for interpolations) and `hydra` are free.

The knobs' keys under `sweep` come from the registered methods (`methods.py`), not from a yaml file:
the entry points put each knob's `sweep.<key>` with its default grid into Hydra's ConfigStore before
composing (`sweep.plugins.start`), which evaluate.yaml's `optional sweep_knobs@sweep: registered`
default merges into the composed config (so `sweep.weights=[0.5]` overrides it without a `+`).

A hint leads to something that exists: an unknown top-level key close to a config group's name (or
to a key only that group's files set: `paper_preset`, set by `+paper=...`) is pointed at the group
with its options as `configs/` has them (`group_hint`, `config_groups`); a Lightning 1.x trainer
argument (`trainer.gpus`) at the settings that replace it (`LIGHTNING_1`).

It checks key names only; `schema.check_settings` checks values against the owners' schemas (types,
ranges, combinations).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

HYDRA_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_", "_args_"})
FREE = frozenset({"paths", "hydra"})
COLLECTIONS = frozenset({"logger", "callbacks"})
PRIMARY = ("evaluate", "train", "distill")


def unknown_keys(cfg: Any, fields: dict[str, Any], config_dir: str | Path) -> list[str]:
    """One line per key of `cfg` that nothing reads: `key=value: unknown key; did you mean ...?`.
    `fields` maps the top-level keys the entry points' schemas know to their annotations. At the top
    a key close to a config group's name (or to a key only a group's files set, such as `paper_preset`
    by `+paper=...`) is pointed at the group with its options (`group_hint`)."""
    from omegaconf import DictConfig, OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    tree = yaml_tree(str(config_dir))
    known = set(fields) | set(tree) | FREE | COLLECTIONS
    lines: list[str] = []
    for key, value in plain.items():
        if key not in known:
            lines.append(group_hint(key, value, known, str(config_dir)) or _line(key, value, known))
        elif key in COLLECTIONS and isinstance(value, dict):
            for name, entry in value.items():
                if isinstance(entry, dict):
                    _walk(f"{key}.{name}", entry, None, tree.get(key, {}).get(name), lines)
        elif key not in FREE and isinstance(value, dict):
            _walk(key, value, _model(fields.get(key)), tree.get(key), lines)
    return lines


def _walk(path: str, node: dict, schema: type[BaseModel] | None, tree: Any, lines: list[str]) -> None:
    described = set(schema.model_fields if schema else ()) | set(tree if isinstance(tree, dict) else ())
    if "_target_" in node:
        names = target_keys(node["_target_"], node)
        if names is None and schema is None:  # **kwargs and no schema: anything goes
            return
        known = (names if names is not None else described | named_parameters(node["_target_"])) | HYDRA_KEYS
    else:
        known = described
    for key, value in node.items():
        if key not in known:
            lines.append(_line(f"{path}.{key}", value, known, prefix=f"{path}."))
            continue
        if not isinstance(value, dict):
            continue
        field = schema.model_fields.get(key) if schema else None
        child_schema = _model(field.annotation) if field else None
        child_tree = tree.get(key) if isinstance(tree, dict) else None
        # a field typed as a plain mapping (distill.lora, task.data_files) holds anything
        if "_target_" in value or child_schema or (field is None and isinstance(child_tree, dict)):
            _walk(f"{path}.{key}", value, child_schema, child_tree, lines)


# Lightning 1.x trainer arguments that Lightning 2 dropped, with what sets the same (a `{}`: the value)
LIGHTNING_1 = {
    "gpus": "trainer.accelerator=gpu trainer.devices={}",
    "num_processes": "trainer.accelerator=cpu trainer.devices={}",
    "tpu_cores": "trainer.accelerator=tpu trainer.devices={}",
    "amp_backend": "trainer.precision=16-mixed (or bf16-mixed)",
}


def _line(key: str, value: Any, known: set[str], prefix: str = "") -> str:
    name = key.rsplit(".", 1)[-1]
    choices = sorted(k for k in known if not k.startswith("_"))
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if key.startswith("trainer.") and name in LIGHTNING_1 and {"accelerator", "devices"} <= known:
        hint = f"Lightning 2 has no {name}: set {LIGHTNING_1[name].format(value)} instead"
    elif close:
        hint = f"did you mean {prefix}{close[0]}?"
    else:
        shown = ", ".join(choices[:15]) + (", ..." if len(choices) > 15 else "")
        hint = f"known keys here: {shown}" if choices else "nothing is read here"
    return f"  {key}={value!r}: unknown key; {hint}"


def group_hint(key: str, value: Any, known: set[str], config_dir: str) -> str | None:
    """The line for an unknown top-level `key` whose closest name (among the known keys and the config
    groups) is a config group, or a key that only a group's files set: `did you mean +paper=gsm8k?`
    with the group's options, the value given where it is one of them (else `<option>`), a `+` where
    the group is in no entry point's defaults list. None where the value is a section (a dict) or the
    closest name is a plain key."""
    groups = config_groups(config_dir)
    set_by = group_keys(config_dir)
    names = sorted({k for k in known if not k.startswith("_")} | set(groups) - FREE)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    group = (close[0] if close[0] in groups else set_by.get(close[0])) if close else None
    if group is None or group in FREE or isinstance(value, dict):
        return None
    options, plus = groups[group]
    choice = str(value) if str(value) in options else "<option>"
    return (
        f"  {key}={value!r}: unknown key; did you mean {'+' if plus else ''}{group}={choice}? (config group "
        f"{group}: {', '.join(options)})"
    )


@functools.cache
def config_groups(config_dir: str) -> dict[str, tuple[list[str], bool]]:
    """Each config group (a folder of `configs/` with yaml files): its options, the files but the
    presets (`@package _global_`) that another file of the group builds on (`paper/protocol`, the base
    of each paper task's file), and whether choosing it takes a `+` (the group is in no entry point's
    defaults list: experiment, paper)."""
    import yaml

    root = Path(config_dir)
    in_defaults = set()
    for name in PRIMARY:
        for entry in (yaml.safe_load((root / f"{name}.yaml").read_text()) or {}).get("defaults", []):
            head = next(iter(entry)) if isinstance(entry, dict) else entry
            in_defaults.add(str(head).split()[-1].split("@")[0].lstrip("/").split("/")[0])
    groups: dict[str, tuple[list[str], bool]] = {}
    for group in sorted(p for p in root.iterdir() if p.is_dir()):
        texts = {p.stem: p.read_text() for p in sorted(group.glob("*.yaml"))}
        files = {name: yaml.safe_load(text) or {} for name, text in texts.items()}
        bases = {
            entry
            for data in files.values()
            for entry in (data.get("defaults") or [])
            if isinstance(entry, str)
            and entry in files
            and "@package _global_" in texts[entry].split("\n", 3)[0]
        }
        if files:
            groups[group.name] = ([o for o in files if o not in bases], group.name not in in_defaults)
    return groups


@functools.cache
def group_keys(config_dir: str) -> dict[str, str]:
    """The top-level keys that only a config group's `@package _global_` files set (no entry point's
    config holds them, no group is named so), each with its group: `paper_preset` -> `paper`."""
    import yaml

    root = Path(config_dir)
    taken = set(config_groups(config_dir))
    for name in PRIMARY:
        taken |= set(yaml.safe_load((root / f"{name}.yaml").read_text()) or {})
    found: dict[str, str] = {}
    for group in sorted(p for p in root.iterdir() if p.is_dir()):
        for file in sorted(group.glob("*.yaml")):
            text = file.read_text()
            if "@package _global_" in text.split("\n", 3)[0]:
                for key in yaml.safe_load(text) or {}:
                    if key not in taken and key != "defaults":
                        found.setdefault(key, group.name)
    return found


def target_keys(target: Any, node: dict) -> set[str] | None:
    """The keys a `_target_` takes: what its `config_keys(node)` says where it has one (`reads_keys`:
    `tasks.load_task`, whose keys are the chosen task's options), else its named parameters; None where
    it takes anything (`**kwargs`, or a target that cannot be imported here: Hydra names that one when
    it instantiates)."""
    if not isinstance(target, str):
        return None
    found = _target(target)
    if callable(keys_of := getattr(found, "config_keys", None)):
        return keys_of(node)
    params = _parameters(found)
    if params is None or any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is not p.VAR_POSITIONAL}


def reads_keys(keys_of: Callable[[dict], set[str] | None]) -> Callable[[Any], Any]:
    """Mark a `_target_` whose config node's keys are not its signature's: `keys_of(node)` names them
    (None: anything goes). `target_keys` asks it; the target's module knows its keys, this one does not."""

    def mark(target: Any) -> Any:
        target.config_keys = keys_of
        return target

    return mark


def named_parameters(target: Any) -> set[str]:
    """The target's named parameters (none where it cannot be imported)."""
    params = _parameters(_target(target)) or []
    return {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _target(target: Any) -> Any:
    """The object a `_target_` names, or None where it cannot be imported."""
    try:
        import hydra.utils

        return hydra.utils.get_object(target)
    except Exception:
        return None


def _parameters(found: Any) -> list[inspect.Parameter] | None:
    if found is None:
        return None
    try:
        return list(inspect.signature(found).parameters.values())
    except Exception:
        return None


def _model(annotation: Any) -> type[BaseModel] | None:
    """The schema model a field holds (unwrapping `X | None` and `Annotated`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model(arg)
        if found is not None:
            return found
    return None


@functools.cache
def yaml_tree(config_dir: str) -> dict[str, Any]:
    """What our yaml files define, as one nested dict of keys: the entry points' configs at the
    top, each config group's files merged under the group's name. Files placed at the top level
    (`# @package _global_`: experiments, presets) are what is checked, not what is known."""
    import yaml

    root = Path(config_dir)
    tree: dict[str, Any] = {}
    for name in PRIMARY:
        _merge(tree, yaml.safe_load((root / f"{name}.yaml").read_text()) or {})
    for group in sorted(p for p in root.iterdir() if p.is_dir()):
        for file in sorted(group.glob("*.yaml")):
            text = file.read_text()
            if "@package _global_" in text.split("\n", 3)[0]:
                continue
            _merge(tree.setdefault(group.name, {}), yaml.safe_load(text) or {})
    return tree


def _merge(into: dict[str, Any], data: dict[str, Any]) -> None:
    for key, value in data.items():
        if key == "defaults":
            continue
        if isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value)
        else:
            into.setdefault(key, None)
