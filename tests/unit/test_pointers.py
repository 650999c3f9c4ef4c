"""Names and pointers that outlive what they named: a test file is named for the behaviour it pins, and a pointer
from code to the documentation names a page and a heading that page still has (the reference moved from README
to docs/*.md, so a pointer to a README section that left must fail here, not mislead an operator)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where pointers live: the product packages, the tests, the benchmarks and the scripts.
CODE_DIRS = ("hotboard", "flusher", "ingest", "reader_api", "archive", "cli", "tests", "bench", "scripts")

#: The one accepted form: ``README, "Heading"``, ``docs/page.md, "Heading"`` or ``deploy/k8s/README.md, "Heading"``.
_POINTER = re.compile(r'((?<![\w/])(?:[\w-]+/)*README(?:\.md)?|\bdocs/[\w-]+\.md)\s*,\s*"([^"\n]+)"')
#: A page named on its own (``docs/page.md``): the file must exist.
_PAGE = re.compile(r"\bdocs/[\w-]+\.md\b")
#: Any other way of pointing into README (``see README``, ``README, Guarantees``, ``README (Board semantics)``,
#: ``README's "..."``): it names no heading the check can hold to.
_LOOSE = re.compile(r"\bsee README\b|\bREADME(?:\.md)?\s*[,(]|\bREADME(?:'s)?\s+\"")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _files() -> list[Path]:
    me = Path(__file__).resolve()
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py") if p.resolve() != me)


def headings(page: Path) -> set[str]:
    return set(_HEADING.findall(_FENCE.sub("", page.read_text())))


def bad_pointers(text: str, root: Path) -> list[str]:
    """The pointers of ``text`` that name a missing page or heading, or point into README loosely."""
    bad = []
    spans = []
    for match in _POINTER.finditer(text):
        spans.append(match.span())
        name, heading = match.groups()
        page = root / (name if name.endswith(".md") else f"{name}.md")
        if not page.exists():
            bad.append(f"{match.group(0)}: no page {name}")
        elif heading not in headings(page):
            bad.append(f"{match.group(0)}: {name} has no heading {heading!r}")
    bad += [f"{m.group(0)}: no such page" for m in _PAGE.finditer(text) if not (root / m.group(0)).exists()]
    for match in _LOOSE.finditer(text):
        if not any(start <= match.start() < end for start, end in spans):
            start = text.rfind("\n", 0, match.start()) + 1
            line = text[start:].partition("\n")[0]
            bad.append(f'{line.strip()}: name a page and a heading, PAGE, "Heading"')
    return bad


def test_test_files_are_named_for_their_behaviour() -> None:
    named = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if "review" in p.name.lower()]
    assert not named, f"name these for the behaviour they pin, not the review that found it: {named}"


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pointers_name_a_heading_that_exists(path: Path) -> None:
    assert not bad_pointers(path.read_text(), ROOT)


def test_the_checker_finds_moved_sections(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# hotboard\n\n## Where things live\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "README.md").write_text("# deploy\n\n## Redis users\n")
    (tmp_path / "docs" / "guarantees.md").write_text("# Guarantees\n\n## Fault model\n```\n# not a heading\n```\n")
    text = "\n".join(
        [
            'ok: README, "Where things live"; docs/guarantees.md, "Fault model"; docs/guarantees.md',
            'ok: deploy/README.md, "Redis users"',
            'moved: README, "Guarantees"',
            'fenced: docs/guarantees.md, "not a heading"',
            "gone: docs/runbooks.md",
            "loose: see README to lift it",
            "loose: README (Board semantics)",
            'loose: README\'s "exit 0 within 10 s"; not a pointer: ROOT / "README.md", (ROOT / "README.md")',
        ]
    )
    assert bad_pointers(text, tmp_path) == [
        "README, \"Guarantees\": README has no heading 'Guarantees'",
        "docs/guarantees.md, \"not a heading\": docs/guarantees.md has no heading 'not a heading'",
        "docs/runbooks.md: no such page",
        'loose: see README to lift it: name a page and a heading, PAGE, "Heading"',
        'loose: README (Board semantics): name a page and a heading, PAGE, "Heading"',
        'loose: README\'s "exit 0 within 10 s"; not a pointer: ROOT / "README.md", (ROOT / "README.md"): name a page '
        'and a heading, PAGE, "Heading"',
    ]
