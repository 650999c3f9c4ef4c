"""Every relative link in README.md and docs/*.md names a file that exists and, with a ``#fragment``, a heading
of that file: the reference was split into pages, so a moved section must not leave a dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text a renderer turns into links: no fenced blocks, no code spans."""
    return _CODE_SPAN.sub("x", _FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def dead_links(page: Path) -> list[str]:
    """Relative links of page whose file or heading does not exist."""
    dead = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            dead.append(f"{target}: no file {file}")
        elif fragment and (file.suffix != ".md" or fragment not in anchors(file.read_text())):
            dead.append(f"{target}: no heading #{fragment} in {file.name}")
    return dead


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert not dead_links(page)


def test_the_checker_finds_dead_files_and_headings(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Read API\n\n## Limits (hostile clients)\n\n## Limits (hostile clients)\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#limits-hostile-clients) [twice](b.md#limits-hostile-clients-1) [self](#top)\n\n# Top\n\n"
        "[gone](c.md) [no heading](b.md#limits) [web](https://example.com/x.md) `[code](c.md)`\n\n"
        "```\n[fenced](c.md)\n```\n![picture](missing.png)\n"
    )
    assert dead_links(page) == [
        f"c.md: no file {tmp_path / 'c.md'}",
        "b.md#limits: no heading #limits in b.md",
        f"missing.png: no file {tmp_path / 'missing.png'}",
    ]
