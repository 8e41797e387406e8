"""The README's demo results are the report's text: every cell of a table between its demo markers is the
cell of the same table (by its caption's title), row (pair, method, N) and column in the report's claims
(docs/demo_claims.md, written with them by `scripts/demo.py --docs` from the report rendered from the run's
records), every number in the section's prose is in the claims' prose, and the filler replaces exactly what
lies between the markers."""

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


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(text: str) -> tuple[dict[str, dict[tuple[str, ...], dict[str, str]]], str]:
    """A report's Markdown: its tables by their caption's bold title ("Table (T = 1)"), each row by its
    index (the first three columns: pair, method / baseline / row, N) as {column header: cell}; and its
    prose (every line outside a table)."""
    tables: dict[str, dict[tuple[str, ...], dict[str, str]]] = {}
    prose, title, lines, i = [], None, text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header, rows = _cells(line), {}
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                row = dict(zip(header, _cells(lines[i]), strict=True))
                rows[tuple(row[h] for h in header[:3])] = row
                i += 1
            assert title is not None and title not in tables, f"a table without its own caption: {header}"
            tables[title] = rows
            continue
        if m := re.match(r"\*\*(.+?)\*\*", line):
            title = m.group(1)
        prose.append(line)
        i += 1
    return tables, "\n".join(prose)


def _tied_to_cells(section: str, claims: str, what: str) -> None:
    """Every table cell of `section` is the claims' cell at the same (table, row, column); every number in
    its prose is in the claims' prose."""
    mine, prose = _tables(section)
    theirs, their_prose = _tables(claims)
    for title, rows in mine.items():
        assert title in theirs, f"{what}: table {title!r} is in no report"
        for index, row in rows.items():
            assert index in theirs[title], f"{what}: {title!r} has no row {index} in the report"
            for column, cell in row.items():
                assert theirs[title][index].get(column) == cell, (
                    f"{what}: {title!r} row {index} column {column!r} reads {cell!r}, the report "
                    f"{theirs[title][index].get(column)!r}"
                )
    missing = _numbers(prose) - _numbers(their_prose)
    assert not missing, f"{what}: numbers in its prose that no report wrote: {sorted(missing)}"


def _section_tied(markers: tuple[str, str], claims_name: str, what: str, command: str) -> tuple[str, str]:
    """The README's section between `markers` and its report's claims (docs/`claims_name`), the section
    not empty and tied to the claims' cells (`_tied_to_cells`)."""
    begin, end = markers
    section = (ROOT / "README.md").read_text().split(begin, 1)[1].split(end, 1)[0]
    claims = (ROOT / "docs" / claims_name).read_text()
    assert section.strip(), f"the README's {what} section is empty: run {command}"
    _tied_to_cells(section, claims, f"the README's {what} section")
    return section, claims


def test_tables_are_tied_to_cells_not_to_a_set_of_numbers():
    claims = "**Table (T = 1)**: caption 3 seeds\n\n| pair | method | N | toy: q |\n|---|---|---|---|\n"
    claims += "| toy | AR | – | 84.00 |\n| toy | SD | 3 | 85.00 |\n"
    _tied_to_cells(claims, claims, "the same text")
    swapped = claims.replace("| 84.00 |", "| 8.50 |").replace("| 85.00 |", "| 84.00 |")
    # both numbers are in the report (a set check passes), each in the other's cell (this one does not)
    with pytest.raises(AssertionError, match="row \\('toy', 'AR', '–'\\) column 'toy: q' reads '85.00'"):
        _tied_to_cells(swapped.replace("| 8.50 |", "| 85.00 |"), claims, "swapped cells")
    with pytest.raises(AssertionError, match="numbers in its prose that no report wrote: \\['4'\\]"):
        _tied_to_cells(claims.replace("3 seeds", "4 seeds"), claims, "prose")
    with pytest.raises(AssertionError, match="in no report"):
        _tied_to_cells(claims.replace("T = 1", "T = 2"), claims, "another table")


def test_every_number_in_the_readme_demo_section_comes_from_the_report():
    demo = _demo()
    section, claims = _section_tied(
        (demo.BEGIN, demo.END), "demo_claims.md", "demo", "python scripts/demo.py --docs docs"
    )
    build_a, build_b = (ROOT / "docs" / f"demo_claims_build_{x}.md" for x in "ab")
    if build_a.is_file():  # two builds: every cell is the hull of the two reports' cells
        merged, _, _ = demo.across_builds(build_a.read_text(), build_b.read_text())
        assert _tables(claims)[0] == _tables(merged)[0], "docs/demo_claims.md is not the merge of its builds"
    assert "chosen on validation" in section and "accepted/proposed" in section


def test_every_number_in_the_readme_real_demo_section_comes_from_its_report():
    """The same for the real demo (scripts/demo_real.py --docs: docs/demo_real_claims.md)."""
    demo = _demo("demo_real")
    section, _ = _section_tied(
        (demo.BEGIN, demo.END), "demo_real_claims.md", "real-demo", "python scripts/demo_real.py --docs docs"
    )
    assert "XSum test articles" in section and "accepted/proposed" in section


def test_every_number_in_the_readme_pair_demo_section_comes_from_its_report():
    """The same for the Qwen pair's demo (scripts/demo_real.py --pair qwen25coder --docs:
    docs/demo_real_qwen25coder_claims.md), and the prose below it quotes that section's numbers."""
    demo = _demo("demo_real")
    section, _ = _section_tied(
        (demo.PAIR_BEGIN, demo.PAIR_END),
        "demo_real_qwen25coder_claims.md",
        "pair-demo",
        "scripts/demo_real.py --pair qwen25coder --docs docs",
    )
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


def test_two_builds_give_each_cell_the_hull_of_their_intervals():
    demo = _demo()
    head = "**Table (T = 1)**: caption\n\n| pair | method | N | toy: q | toy: time |\n|---|---|---|---|---|\n"
    a = head + "| toy | AR | – | 84.00 [78.00, 89.00] | 1.00 [1.00, 1.00] b1 |\n"
    a += "| toy | Static | 5 | 82.00 [75.67, 87.67] (w=1)* | 1.06 [0.53, 1.59] b1 |\n"
    b = head + "| toy | AR | – | 99.00 [97.33, 99.67] | 1.00 [1.00, 1.00] b1 |\n"
    b += "| toy | Static | 5 | 80.00 [74.00, 86.00] (w=0.8) | 0.98 [0.60, 1.40] b1 |\n"
    text, counts, outside = demo.across_builds(a, b)
    assert "| toy | AR | – | 84.00 [78.00, 99.67] | 1.00 [1.00, 1.00] b1 |" in text  # A's estimate, the hull
    assert (
        "| toy | Static | 5 | 82.00 [74.00, 87.67] (w=1)* (build B: (w=0.8)) | 1.06 [0.53, 1.59] b1 |" in text
    )
    assert counts == {
        "cells": 4,
        "inside": 3,
        "identical": 1,
        "time_cells": 2,
        "time_inside": 2,
        "differ_note": 1,
    }
    assert outside == [
        "Table (T = 1) | toy | AR | – | toy: q: A 84.00 [78.00, 89.00], B 99.00 [97.33, 99.67]"
    ]
    assert text.startswith("**Table (T = 1)**: caption")


@pytest.mark.parametrize(
    ("end", "claims"),
    [
        ("END", "demo_claims.md"),
        ("END", "demo_real_claims.md"),
        ("PAIR_END", "demo_real_qwen25coder_claims.md"),
    ],
    ids=["toy", "smollm2", "qwen25coder"],
)
def test_the_prose_after_a_demo_section_quotes_only_its_report(end, claims):
    """What a demo's results "show", in the prose from its end marker to the next heading: every decimal
    there is in the report's claims (code, commands and image names aside), never a number computed
    beside the report."""
    demo = _demo("demo" if claims == "demo_claims.md" else "demo_real")
    marker = getattr(demo, end) if claims != "demo_real_claims.md" else demo.END
    after = (ROOT / "README.md").read_text().split(marker, 1)[1]
    prose = re.split(r"\n#{2,3} ", after, maxsplit=1)[0]
    prose = re.sub(r"`[^`]*`|!\[[^\]]*\]\([^)]*\)", " ", prose)  # code spans and images
    decimals = {n for n in _numbers(prose) if "." in n}
    missing = decimals - _numbers((ROOT / "docs" / claims).read_text())
    assert not missing, (
        f"decimals in the prose after {claims}'s section that its report never wrote: {sorted(missing)}"
    )


def test_the_readme_speed_headline_quotes_the_bench_run_in_benchmarks_md():
    """Every number in the README's CPU speed bullet is in BENCHMARKS.md's section of the run that
    measured it (its tables are the bench's printed output)."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("- **Speed on 2 CPU cores**")
    bullet = readme[start : readme.index("\n- **", start + 1)]
    bench = (ROOT / "BENCHMARKS.md").read_text()
    head = "## The Qwen pair on 2 CPU cores"
    section = bench[bench.index(head) : bench.index("\n## ", bench.index(head) + 1)]
    missing = _numbers(bullet) - _numbers(section) - {"2", "1", "8"}  # cores, batch sizes
    assert not missing, f"README speed numbers not in BENCHMARKS.md's run: {sorted(missing)}"
