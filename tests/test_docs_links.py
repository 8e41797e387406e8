"""The README and docs/ hold together: every relative link and image in README.md and docs/*.md points at a
file that exists (and at a heading of it, where the link names one), the README's lines stay readable, and
its engine example runs as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """`text` without fenced code blocks and code spans (a `[...](...)` there is code, not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", _prose(page.read_text()), flags=re.M)}


def links(page: Path) -> list[str]:
    """The relative targets of `page`'s links and images (web addresses and mail left out)."""
    return [t for t in LINK.findall(_prose(page.read_text())) if not re.match(r"[a-z]+:", t)]


def test_the_link_finder_finds_links_and_skips_code():
    page = "[a](docs/x.md) ![b](y.png) `[c](z.md)` [d](https://e.org)\n```\n[f](g.md)\n```\n"
    assert [t for t in LINK.findall(_prose(page)) if not re.match(r"[a-z]+:", t)] == ["docs/x.md", "y.png"]
    assert _slug("A method of your own, further") == "a-method-of-your-own-further"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_points_at_a_file_that_exists(page):
    bad = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            bad.append(f"{target}: {file.relative_to(ROOT)} has no heading #{anchor}")
    assert not bad, f"{page.relative_to(ROOT)}: {bad}"


def test_the_readme_shows_committed_figures_and_links_every_docs_page():
    targets = links(ROOT / "README.md")
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", _prose((ROOT / "README.md").read_text()))
    assert images and all(i.startswith("docs/") and (ROOT / i).is_file() for i in images), images
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    claims = {
        p for p in pages if "claims" in p
    }  # the reports' claims: the pages with their sections link them
    assert pages - claims <= set(targets), (
        f"docs pages the README does not link: {pages - claims - set(targets)}"
    )


def test_the_readme_lines_stay_readable():
    """At most 120 characters a line outside tables, and no line over 300 anywhere."""
    lines = (ROOT / "README.md").read_text().splitlines()
    long = [i for i, line in enumerate(lines, 1) if len(line) > 120 and not line.startswith("|")]
    assert not long, f"README.md lines over 120 characters: {long}"
    assert max(map(len, lines)) <= 300


def test_the_readme_engine_example_runs(capsys):
    """The first Python block of "The engine in ten lines", run as printed on the shipped toy pair."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The engine in ten lines", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    scores, rate = printed.rsplit("] ", 1)
    assert scores.startswith("[") and len(scores.strip("[]").split(",")) == 4  # a score per prompt
    assert 0.0 <= float(rate) <= 1.0  # the acceptance rate
