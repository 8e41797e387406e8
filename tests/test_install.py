"""A normal (non-editable) install works: the configs ship in the wheel and every entry point composes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from test_cli import SCRIPTS

from diversed.models import toy

ROOT = Path(__file__).resolve().parents[1]
# every console script (tests/test_cli.py's list, which runs them): `main` returns its exit status
ENTRY_POINTS = {name: f"diversed.{name}:main" for name in SCRIPTS}

COMPOSE = """
import sys
from pathlib import Path
import diversed
from hydra import compose, initialize_config_dir
assert Path(diversed.__file__).is_relative_to(sys.argv[1]), diversed.__file__
assert Path(diversed.CONFIG_DIR).is_relative_to(sys.argv[1]), diversed.CONFIG_DIR
with initialize_config_dir(config_dir=diversed.CONFIG_DIR, version_base="1.3"):
    for name in ("train", "evaluate", "likelihood"):
        for experiment in ("toy", "llama8b_1b", "qwen3_8b_0p6b"):
            cfg = compose(name, overrides=[f"+experiment={experiment}"])
            assert cfg.pair._target_.startswith("diversed."), cfg.pair
    print("composed")
"""


def test_a_wheel_ships_the_configs_and_every_entry_point_composes(tmp_path):
    wheels, target, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "source"
    # built from a copy: setuptools leaves build/ beside the sources, which later wheels would reuse
    shutil.copytree(ROOT / "diversed", source / "diversed", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)  # noqa: E731
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(wheels),
        str(source),
    )
    wheel = next(wheels.glob("diversed-*.whl"))
    run(sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel))
    configs = sorted(
        p.relative_to(target).as_posix() for p in (target / "diversed" / "configs").rglob("*.yaml")
    )
    assert "diversed/configs/train.yaml" in configs and "diversed/configs/pair/toy.yaml" in configs
    assert len(configs) == len(list((ROOT / "diversed" / "configs").rglob("*.yaml")))
    shipped = target / "diversed" / "models" / "toy_pair"  # the toy pair ships whole, as committed
    assert toy.verify_shipped(shipped) == shipped
    scripts = next(target.glob("diversed-*.dist-info")).joinpath("entry_points.txt").read_text()
    for name, function in ENTRY_POINTS.items():
        assert f"diversed-{name} = {function}" in scripts
    out = subprocess.run(
        [sys.executable, "-c", COMPOSE, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert out.returncode == 0 and "composed" in out.stdout, out.stderr[-2000:]
