"""The modules' names from before the subpackages still import, as the same module, with a warning."""

from __future__ import annotations

import subprocess
import sys

from diversed.moved import OLD_NAMES, current_name


def test_old_names_import_the_new_modules_with_a_warning():
    # a fresh interpreter: nothing imported yet, the old name resolved by diversed's finder alone
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error', FutureWarning)\n"
        "import diversed\n"
        "try:\n"
        "    import diversed.results\n"
        "except FutureWarning as w:\n"
        "    print('warned:', w)\n"
        "warnings.simplefilter('ignore', FutureWarning)\n"
        "import diversed.results as old, diversed.sweep.results as new\n"
        "print(old is new, new.__name__, new.__spec__.name)\n"
        "from hydra.utils import get_method\n"
        "new = importlib.import_module('diversed.models.pair').load_pair\n"
        "print(get_method('diversed.pair.load_pair') is new)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "warned: `diversed.results` is now `diversed.sweep.results`" in out
    assert "True diversed.sweep.results diversed.sweep.results" in out
    assert out.strip().endswith("True")


def test_every_old_name_points_at_a_module_that_exists():
    import importlib.util

    for old, new in OLD_NAMES.items():
        assert old != new and new.count(".") == 2, (old, new)
        assert importlib.util.find_spec(new) is not None, (old, new)
        assert importlib.util.find_spec(old.replace("diversed.", "diversed._no_such_")) is None


def test_current_name():
    assert current_name("diversed.pair.load_pair") == "diversed.models.pair.load_pair"
    assert current_name("diversed.pairs.x") == "diversed.pairs.x"  # a prefix of a name is not the name
    assert current_name("diversed.models.pair.load_pair") == "diversed.models.pair.load_pair"
    assert current_name("diversed.toy.load_toy_pair") == "diversed.toy.load_toy_pair"  # a verb kept its name


def test_the_package_uses_only_the_new_names():
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "diversed"
    old = set(OLD_NAMES) | {n.removeprefix("diversed.") for n in OLD_NAMES}
    bad = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                if node.module == "diversed":
                    names = [f"diversed.{a.name}" for a in node.names]
                bad += [f"{path.name}: {n}" for n in names if n in OLD_NAMES]
            elif isinstance(node, ast.Import):
                bad += [f"{path.name}: {a.name}" for a in node.names if a.name in OLD_NAMES]
    assert old and not bad, bad
