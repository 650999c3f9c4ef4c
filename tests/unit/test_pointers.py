"""Names that outlive what they named: a test file is named for the behaviour it pins."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_test_files_are_named_for_their_behaviour() -> None:
    named = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if "review" in p.name.lower()]
    assert not named, f"name these for the behaviour they pin, not the review that found it: {named}"
