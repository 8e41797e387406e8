"""The package's shape: no import cycles, no private names imported across modules, and layers that hold
for every part (`MAY_IMPORT`), function-level imports included, with no cycle between parts. Read from
the source with `ast` (nothing is imported). Module size follows concepts: there is no line cap."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "diversed"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, name: str) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in the file, function-level too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [a.name for a in node.names]))
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for target, names in imports(path, name):
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if candidate in mods and candidate != name:
                    edges[name].add(candidate)
                    break
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph `edges` (node -> the nodes it imports), or None."""
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, stack + [nxt])):
                return found
        state[node] = 2
        return None

    return next((c for node in sorted(edges) if node not in state and (c := visit(node, [node]))), None)


def test_no_import_cycles():
    # the package's own __init__ only names its exports lazily (importlib), no edges there
    edges = {name: targets - {"diversed"} for name, targets in graph().items()}
    assert cycle(edges) is None, f"import cycle: {' -> '.join(cycle(edges))}"
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # (it can fail)


def test_no_private_names_imported_across_modules():
    bad = []
    for name, path in modules().items():
        for target, names in imports(path, name):
            if target.startswith("diversed"):
                bad += [
                    f"{name} imports {target}.{n}" for n in names if n.startswith("_") and n != "__version__"
                ]
    assert not bad, bad


def test_the_graph_sees_the_imports():
    """The checks above can fail: the graph has the engine's own imports."""
    edges = graph()
    assert {"diversed.decoding.forward", "diversed.decoding.verify", "diversed.decoding.stats"} <= edges[
        "diversed.decoding.engine"
    ]
    assert "diversed.decoding.engine" in edges["diversed.decoding.autoregressive"]


# ----------------------------------------------------------------------------- layout
# Nouns in subpackages, verbs on top: the entry points (`python -m diversed.<verb>`) are top-level
# modules and no subpackage imports one; `errors` (the user-error type) and `moved` (the old names)
# are the two top-level modules every layer may use, with the lazy package `diversed` itself.
SHARED = {"diversed", "diversed.errors", "diversed.moved"}
# What each part may import besides itself and SHARED, bottom to top (each subpackage's docstring says
# the same): the engine knows nothing of models' files, tasks, training or sweeps; config is the generic
# settings machinery and knows no domain; the analysis reads records, never a model.
MAY_IMPORT = {
    "decoding": set(),
    "files": set(),
    "config": {"files"},
    "models": {"decoding", "files", "config"},
    "tasks": {"decoding", "files", "config", "models"},
    "training": {"decoding", "files", "config", "models", "tasks"},
    "sweep": {"decoding", "files", "config", "models", "tasks"},
    "analysis": {"files", "sweep"},
}


def part(name: str) -> str | None:
    """The subpackage a module belongs to (`diversed.decoding.engine` -> decoding); None for a verb."""
    pieces = name.split(".")
    if len(pieces) > 2 or (len(pieces) == 2 and modules()[name].name == "__init__.py"):
        return pieces[1]
    return None


def test_no_subpackage_imports_an_entry_point():
    bad = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if part(name) is not None
        for target in targets
        if target not in SHARED and part(target) is None
    ]
    assert not bad, bad


def test_every_part_imports_only_what_it_may():
    """Function-level imports included (`imports` walks every import node of a file)."""
    parts = {part(n) for n in modules()} - {None}
    assert parts == set(MAY_IMPORT), "a new subpackage: declare what it may import"
    bad = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if part(name) is not None
        for target in targets
        if target not in SHARED and part(target) not in {part(name), *MAY_IMPORT[part(name)]}
    ]
    assert not bad, bad


def test_the_shared_modules_import_no_part():
    """`errors` and `moved`, which every layer may import, import nothing of the package but each other;
    the package's `__init__` names its exports lazily (importlib), no edge to a part."""
    bad = [f"{name} imports {t}" for name in SHARED for t in graph()[name] if t not in SHARED]
    assert not bad, bad


def test_no_cycle_between_parts():
    """The parts' graph (an edge where any module of one imports any of another) has no cycle, whatever
    MAY_IMPORT says."""
    edges: dict[str, set[str]] = {}
    for name, targets in graph().items():
        for target in targets:
            if part(name) is not None and part(target) not in (None, part(name)):
                edges.setdefault(part(name), set()).add(part(target))  # type: ignore[arg-type]
    assert cycle(edges) is None, f"cycle between parts: {' -> '.join(cycle(edges))}"


def test_the_layer_checks_can_fail(tmp_path):
    """An import inside a function counts as one at the top, a relative one as its absolute name; and
    MAY_IMPORT is a strict order (no part may import one that may import it)."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from diversed.sweep import methods\n    from .. import errors\n")
    assert imports(module, "diversed.decoding.m") == [
        ("diversed.sweep", ["methods"]),
        ("diversed", ["errors"]),
    ]
    for low, allowed in MAY_IMPORT.items():
        for high in allowed:
            assert low not in MAY_IMPORT[high], (low, high)
