"""Package imports point one way: the shared base (``hotboard``) <- ``flusher`` <- ``ingest``, and the base <-
``reader_api``; the shell (``cli``) sits on top and is the one package that may import every other. Modules stay
small, except where README says why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hotboard", "flusher", "ingest", "reader_api", "archive", "cli")
#: package -> the project packages its modules may import.
ALLOWED = {
    "hotboard": {"hotboard"},
    "flusher": {"hotboard", "flusher"},
    "ingest": {"hotboard", "flusher", "ingest"},
    "reader_api": {"hotboard", "reader_api"},
    "archive": {"hotboard", "flusher", "ingest", "archive"},
    "cli": set(PACKAGES),
}
#: package -> base modules it must not import: the sink applies what the batch carries (a period's logical
#: board, id and expiry are decided once, at routing), it never works out a season again.
FORBIDDEN = {"flusher": {"hotboard.periods"}}
#: Modules allowed past MAX_LINES, and why (README, "Where things live", says the same).
LONG = {
    "ingest/worker.py": "the lifecycle and the numbered flush step, kept in one reading",
}
MAX_LINES = 320


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _modules_imported(path: Path) -> set[str]:
    """Every module ``path`` imports, by its dotted name (``from a import b`` counts ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
    return found


def _imports(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _modules_imported(path)} & set(PACKAGES)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_one_way(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    package = rel.split("/")[0]
    wrong = _imports(path) - ALLOWED[package]
    assert not wrong, f"{rel} imports {sorted(wrong)}; {package} may import only {sorted(ALLOWED[package])}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_forbidden_base_modules_stay_out(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    forbidden = FORBIDDEN.get(rel.split("/")[0], set())
    wrong = {m for m in _modules_imported(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
    assert not wrong, f"{rel} imports {sorted(wrong)}: the batch carries what it needs of them"


def test_modules_stay_small() -> None:
    long = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules()}
    over = {m: n for m, n in long.items() if n > MAX_LINES and m not in LONG}
    assert not over, f"modules over {MAX_LINES} lines without a reason in LONG (and README): {over}"
    readme = (ROOT / "README.md").read_text()
    for module in LONG:
        assert module in readme, f"README should say why {module} is long"
