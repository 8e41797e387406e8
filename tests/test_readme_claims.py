"""The README's demo results are the report's text: every number between its demo markers is in the
report's claims (docs/demo_claims.md, written with them by `scripts/demo.py --docs`), and the filler
replaces exactly what lies between the markers."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"[-+−]?\d+(?:\.\d+)?")


def _demo(name: str = "demo"):
    if str(ROOT / "scripts") not in sys.path:  # demo_real imports demo, as when run as a script
        sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numbers(text: str) -> set[str]:
    return {n.replace("−", "-").lstrip("+") for n in NUMBER.findall(text)}


def test_every_number_in_the_readme_demo_section_comes_from_the_report():
    demo = _demo()
    readme = (ROOT / "README.md").read_text()
    section = readme.split(demo.BEGIN, 1)[1].split(demo.END, 1)[0]
    claims = (ROOT / "docs" / "demo_claims.md").read_text()
    assert section.strip(), "the README's demo section is empty: run python scripts/demo.py --docs docs"
    missing = _numbers(section) - _numbers(claims)
    assert not missing, f"numbers in the README's demo section that no report wrote: {sorted(missing)}"
    assert "chosen on validation" in section and "accepted/proposed" in section


def test_every_number_in_the_readme_real_demo_section_comes_from_its_report():
    """The same for the real demo (scripts/demo_real.py --docs: docs/demo_real_claims.md)."""
    demo = _demo("demo_real")
    readme = (ROOT / "README.md").read_text()
    section = readme.split(demo.BEGIN, 1)[1].split(demo.END, 1)[0]
    claims = (ROOT / "docs" / "demo_real_claims.md").read_text()
    assert section.strip(), (
        "the README's real-demo section is empty: run python scripts/demo_real.py --docs docs"
    )
    missing = _numbers(section) - _numbers(claims)
    assert not missing, f"numbers in the README's real-demo section that no report wrote: {sorted(missing)}"
    assert "XSum test articles" in section and "accepted/proposed" in section


def test_every_number_in_the_readme_pair_demo_section_comes_from_its_report():
    """The same for the Qwen pair's demo (scripts/demo_real.py --pair qwen25coder --docs:
    docs/demo_real_qwen25coder_claims.md), and the prose below it quotes that section's numbers."""
    demo = _demo("demo_real")
    readme = (ROOT / "README.md").read_text()
    section = readme.split(demo.PAIR_BEGIN, 1)[1].split(demo.PAIR_END, 1)[0]
    claims = (ROOT / "docs" / "demo_real_qwen25coder_claims.md").read_text()
    assert section.strip(), (
        "the README's pair-demo section is empty: run scripts/demo_real.py --pair qwen25coder --docs docs"
    )
    missing = _numbers(section) - _numbers(claims)
    assert not missing, f"numbers in the README's pair-demo section that no report wrote: {sorted(missing)}"
    assert "qwen25coder" in section and "Static w=0.84 (DIVERSED's mean w on validation rows" in section


def test_fill_readme_replaces_only_the_marked_section(tmp_path):
    demo = _demo()
    readme = tmp_path / "README.md"
    readme.write_text(f"intro 1\n{demo.BEGIN}\nold 0.44\n{demo.END}\noutro 2\n")
    demo.fill_readme(readme, "| a | 73.65 [71.20, 76.01] |\n")
    assert readme.read_text() == f"intro 1\n{demo.BEGIN}\n| a | 73.65 [71.20, 76.01] |\n{demo.END}\noutro 2\n"
    readme.write_text("no markers")
    with pytest.raises(SystemExit, match="no demo markers"):
        demo.fill_readme(readme, "x")


def test_the_pair_demo_reads_the_heads_mean_w_from_its_dynamic_points(tmp_path):
    demo = _demo("demo_real")
    assert demo.mean_w_of(tmp_path) is None  # no run yet
    lines = [
        {"method": "dynamic", "mean_w": 0.4},
        {"method": "static", "mean_w": 0.9},  # another method's w is not the head's
        {"method": "dynamic", "mean_w": 0.6},
        {"method": "dynamic", "mean_w": None},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert demo.mean_w_of(tmp_path) == pytest.approx(0.5)
