"""The demos' results in the docs are the reports' text: every cell of a table between a page's demo markers
(docs/results.md: the toy demo; docs/real-models.md: the real pairs') is the cell of the same table (by its
caption's title), row (pair, method, N) and column in the report's claims (docs/demo_claims.md, written with
them by `scripts/demo.py --docs` from the report rendered from the run's records), every number in the
section's prose is in the claims' prose, and the filler replaces exactly what lies between the markers. The
README's headline table is five rows of docs/demo_claims.md picked by `demo.headline`, each cell the claims'
own, and filling from the committed claims changes no page."""

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


RESULTS, REAL = ROOT / "docs" / "results.md", ROOT / "docs" / "real-models.md"  # where the sections live


def _between(page: Path, markers: tuple[str, str]) -> str:
    begin, end = markers
    body = page.read_text()
    assert begin in body and end in body, f"{page.relative_to(ROOT)} has no markers {begin} ... {end}"
    return body.split(begin, 1)[1].split(end, 1)[0]


def _section_tied(
    page: Path, markers: tuple[str, str], claims_name: str, what: str, command: str
) -> tuple[str, str]:
    """`page`'s section between `markers` and its report's claims (docs/`claims_name`), the section not
    empty and tied to the claims' cells (`_tied_to_cells`)."""
    section = _between(page, markers)
    claims = (ROOT / "docs" / claims_name).read_text()
    assert section.strip(), f"{page.relative_to(ROOT)}'s {what} section is empty: run {command}"
    _tied_to_cells(section, claims, f"{page.relative_to(ROOT)}'s {what} section")
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


def test_every_number_in_the_results_page_demo_section_comes_from_the_report():
    demo = _demo()
    section, claims = _section_tied(
        RESULTS, (demo.BEGIN, demo.END), "demo_claims.md", "demo", "python scripts/demo.py --docs docs"
    )
    build_a, build_b = (ROOT / "docs" / f"demo_claims_build_{x}.md" for x in "ab")
    if build_a.is_file():  # two builds: every cell is the hull of the two reports' cells
        merged, _, _ = demo.across_builds(build_a.read_text(), build_b.read_text())
        assert _tables(claims)[0] == _tables(merged)[0], "docs/demo_claims.md is not the merge of its builds"
    assert "chosen on validation" in section and "accepted/proposed" in section


def test_every_number_in_the_real_demo_section_comes_from_its_report():
    """The same for the real demo (scripts/demo_real.py --docs: docs/demo_real_claims.md)."""
    demo = _demo("demo_real")
    section, _ = _section_tied(
        REAL,
        (demo.BEGIN, demo.END),
        "demo_real_claims.md",
        "real-demo",
        "python scripts/demo_real.py --pair smollm2 --docs docs",
    )
    assert "XSum test articles" in section and "accepted/proposed" in section


def test_every_number_in_the_pair_demo_section_comes_from_its_report():
    """The same for the Qwen pair's demo (scripts/demo_real.py --pair qwen25coder --docs:
    docs/demo_real_qwen25coder_claims.md). The prose below the section is checked by
    `test_the_prose_after_a_demo_section_quotes_only_its_report` (its decimals only)."""
    demo = _demo("demo_real")
    section, _ = _section_tied(
        REAL,
        (demo.PAIR_BEGIN, demo.PAIR_END),
        "demo_real_qwen25coder_claims.md",
        "pair-demo",
        "scripts/demo_real.py --pair qwen25coder --docs docs",
    )
    assert (
        "qwen25coder" in section and "Static w=0.55 (DIVERSED's mean w on validation rows: 0.545)" in section
    )
    assert "at cap %" in section and "in 12 invocations" in section  # the cap column, every invocation said
    assert "Every head against the static ensemble at its own mean w" in section  # DIVERSED's front over λ


HEADLINE_ROWS = [
    "Autoregressive",
    "SD (lossless)",
    "Static, chosen on validation",
    "SD, fine-tuned draft",
    "DIVERSED",
]


def test_the_readme_headline_is_five_rows_of_the_demo_report():
    """The README's headline between its markers is `demo.headline` of docs/demo_claims.md word for word:
    autoregressive decoding, lossless SD, the static ensemble chosen on validation, SD with the fine-tuned
    draft and DIVERSED at the table's largest N, each cell the claims' cell of the same row and column, and
    every number of its caption in the claims' prose."""
    demo = _demo()
    section = _between(ROOT / "README.md", (demo.HEADLINE_BEGIN, demo.HEADLINE_END))
    claims = (ROOT / "docs" / "demo_claims.md").read_text()
    assert section.strip() == demo.headline(claims).strip(), (
        "the README's headline is not the claims': run python scripts/demo.py --docs docs --fill-only"
    )
    tables, their_prose = _tables(claims)
    theirs = tables[demo.HEADLINE_TABLE]
    header, _, *rows = [_cells(line) for line in section.splitlines() if line.startswith("|")]
    assert header == ["method", "N"] + [
        f"{t}: {c}" for t in ("toy", "toy_count") for c in demo.HEADLINE_COLUMNS
    ]
    assert [(r[0], r[1]) for r in rows] == [(m, "–" if m == "Autoregressive" else "5") for m in HEADLINE_ROWS]
    for row in rows:
        cells = dict(zip(header, row, strict=True))
        their = theirs[("toy", cells["method"], cells["N"])]
        for column in header[2:]:
            assert their[column] == cells[column], (
                f"the headline's {cells['method']} {column} reads {cells[column]!r}, the report's "
                f"{their[column]!r}"
            )
    caption = "\n".join(line for line in section.splitlines() if not line.startswith("|"))
    assert _numbers(caption) <= _numbers(their_prose)
    assert "[docs/results.md](docs/results.md)" in caption  # the page with every row


def test_the_headline_picks_its_rows_by_label_at_the_largest_n():
    demo = _demo()
    columns = ["t: accepted/proposed %", "t: α = accepted/verified %", "t: quality ×100", "t: time / AR"]
    text = "**Table (T = 1)**: caption; mean over 2 seeds (0, 1) and the examples [intervals]\n\n"
    text += "| pair | method | N | " + " | ".join(columns) + " |\n" + "|---" * 7 + "|\n"
    rows = [
        ("Autoregressive", "–"),
        ("SD (lossless)", "3"),
        ("SD (lossless)", "5"),
        ("Static, chosen on validation", "5"),
        ("Lossy SD, chosen on validation", "5"),  # no fine-tuned draft: lossy SD in its place
        ("DIVERSED", "3"),
        ("DIVERSED", "5"),
    ]
    for i, (method, n) in enumerate(rows):
        text += f"| p | {method} | {n} | {i}0.00 | {i}1.00 | {i}2.00 | 1.00 |\n"
    text += "| q | DIVERSED | 5 | 90.00 | 91.00 | 92.00 | 1.00 |\n"  # another pair: not in the headline

    said = demo.headline(text, "results.md")

    assert said.splitlines()[-5:] == [
        "| Autoregressive | – | 00.00 | 02.00 |",
        "| SD (lossless) | 5 | 20.00 | 22.00 |",
        "| Static, chosen on validation | 5 | 30.00 | 32.00 |",
        "| Lossy SD, chosen on validation | 5 | 40.00 | 42.00 |",
        "| DIVERSED | 5 | 60.00 | 62.00 |",
    ]
    assert (
        "mean over 2 seeds (0, 1) and the examples [95 % interval]" in said
        and "[results.md](results.md)" in said
    )
    assert all(len(line) <= 120 for line in said.splitlines() if not line.startswith("|"))
    with pytest.raises(SystemExit, match="has no row DIVERSED"):
        demo.headline(text.replace("| DIVERSED |", "| Other |"))


def test_filling_from_the_committed_claims_changes_no_page(tmp_path):
    """What the scripts' fillers write from the committed claims (`scripts/demo.py --docs docs --fill-only`;
    demo_real's `fill_readme` with its markers) is what the pages hold: no generated section was edited by
    hand, and the README holds no generated section but the headline."""
    demo, real = _demo(), _demo("demo_real")
    (tmp_path / "docs").mkdir()
    pages = {tmp_path / "README.md": ROOT / "README.md", tmp_path / "docs" / "results.md": RESULTS}
    pages[tmp_path / "docs" / "real-models.md"] = REAL
    for copy, page in pages.items():
        copy.write_text(page.read_text())
    claims = lambda name: (ROOT / "docs" / name).read_text()  # noqa: E731

    demo.fill_docs(claims("demo_claims.md"), tmp_path / "docs" / "results.md", tmp_path / "README.md")
    real.fill_readme(
        tmp_path / "docs" / "real-models.md", claims("demo_real_claims.md"), (real.BEGIN, real.END)
    )
    pair = (real.PAIR_BEGIN, real.PAIR_END)
    real.fill_readme(tmp_path / "docs" / "real-models.md", claims("demo_real_qwen25coder_claims.md"), pair)

    for copy, page in pages.items():
        assert copy.read_text() == page.read_text(), f"{page.relative_to(ROOT)} is not what its filler writes"
    readme = (ROOT / "README.md").read_text()
    assert not any(m in readme for m in (demo.BEGIN, real.BEGIN, real.PAIR_BEGIN))


def test_fill_readme_replaces_only_the_marked_section(tmp_path):
    demo = _demo()
    readme = tmp_path / "README.md"
    readme.write_text(f"intro 1\n{demo.BEGIN}\nold 0.44\n{demo.END}\noutro 2\n")
    demo.fill_readme(readme, "| a | 73.65 [71.20, 76.01] |\n")
    assert readme.read_text() == f"intro 1\n{demo.BEGIN}\n| a | 73.65 [71.20, 76.01] |\n{demo.END}\noutro 2\n"
    readme.write_text("no markers")
    with pytest.raises(SystemExit, match="no demo markers"):
        demo.fill_readme(readme, "x")


def test_the_pair_demo_reads_each_heads_mean_w_per_temperature_from_its_dynamic_points(tmp_path):
    demo = _demo("demo_real")
    lines = [
        {"method": "dynamic", "head": "h", "temperature": 1.0, "mean_w": 0.4},
        {"method": "static", "head": None, "temperature": 1.0, "mean_w": 0.9},  # not the head's w
        {"method": "dynamic", "head": "h", "temperature": 1.0, "mean_w": 0.6},  # another N
        {"method": "dynamic", "head": "h", "temperature": 0.1, "mean_w": 0.2},
        {"method": "dynamic", "head": "h", "temperature": 0.1, "mean_w": None},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    got = demo.chosen_heads(tmp_path, [Path("h")], [1.0, 0.1])
    assert (
        list(got) == [1.0, 0.1]
        and got[1.0].heads == {"h": pytest.approx(0.5)}
        and got[0.1].heads == {"h": 0.2}
    )
    assert got[1.0].how == "only"


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
    ("page", "end", "claims"),
    [
        ("docs/results.md", "END", "demo_claims.md"),
        ("README.md", "HEADLINE_END", "demo_claims.md"),
        ("docs/real-models.md", "END", "demo_real_claims.md"),
        ("docs/real-models.md", "PAIR_END", "demo_real_qwen25coder_claims.md"),
    ],
    ids=["toy", "headline", "smollm2", "qwen25coder"],
)
def test_the_prose_after_a_demo_section_quotes_only_its_report(page, end, claims):
    """What a demo's results "show", in the prose from its end marker to the next heading: every decimal
    there is in the report's claims (code, commands and image names aside), never a number computed
    beside the report."""
    demo = _demo("demo" if claims == "demo_claims.md" else "demo_real")
    page = ROOT / page
    after = page.read_text().split(getattr(demo, end), 1)[1]
    prose = re.split(r"\n#{2,3} ", after, maxsplit=1)[0]
    prose = re.sub(r"`[^`]*`|!\[[^\]]*\]\([^)]*\)", " ", prose)  # code spans and images
    decimals = {n for n in _numbers(prose) if "." in n}
    missing = decimals - _numbers((ROOT / "docs" / claims).read_text())
    assert not missing, (
        f"decimals in the prose after {claims}'s section that its report never wrote: {sorted(missing)}"
    )


def test_the_speed_bullet_quotes_the_bench_run_in_benchmarks_md():
    """Every number in docs/real-models.md's CPU speed bullet and in the README's speed line is in
    BENCHMARKS.md's sections of the runs that measured it (their tables are the bench's printed output):
    the newest on a CPU with bf16 instructions and every round's on one without (the bullet quotes the
    int8 target's round and the restricted draft's after it)."""
    page = REAL.read_text()
    start = page.index("- **Speed on 2 CPU cores**")
    bullet = page[start : page.index("\n- **", start + 1)]
    readme = (ROOT / "README.md").read_text()
    start = readme.index("**Speed on 2 CPU cores**")
    line = readme[start : readme.index("\n\n", start)]
    bench = (ROOT / "BENCHMARKS.md").read_text()
    newest = bench.index("## The Qwen pair on 2 CPU cores:")
    without = [m.start() for m in re.finditer("## The Qwen pair on 2 CPU cores without bf16", bench)]
    section = "".join(bench[at : bench.index("\n## ", at + 1)] for at in (newest, *without))
    for where, text in (("docs/real-models.md", bullet), ("README.md", line)):
        missing = _numbers(text) - _numbers(section) - {"2", "1", "8"}  # cores, batch sizes
        assert not missing, f"{where}'s speed numbers not in BENCHMARKS.md's run: {sorted(missing)}"


def test_the_likelihood_section_quotes_only_its_runs():
    """docs/real-models.md's section on the heads against a constant at equal acceptance: every decimal
    in it is in the runs' printed tables (docs/likelihood_qwen25coder.md), never one computed beside them."""
    page = REAL.read_text()
    start = page.index("### The heads against a constant at equal acceptance")
    section = page[start : page.index("\n## ", start)]
    section = re.sub(r"`[^`]*`", " ", section)
    runs = (ROOT / "docs" / "likelihood_qwen25coder.md").read_text()
    missing = {n for n in _numbers(section) if "." in n} - _numbers(runs)
    assert not missing, f"decimals in the likelihood section that no run printed: {sorted(missing)}"
