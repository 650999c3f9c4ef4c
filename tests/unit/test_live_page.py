"""The live page's files: every file the page loads is one the API serves from the package, none from elsewhere,
and the wheel ships them (hatch takes every file under the listed packages unless told to exclude)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from reader_api.live_page import ASSETS, STATIC

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_loads_only_files_the_api_serves() -> None:
    html = (STATIC / "live.html").read_text()
    loaded = re.findall(r'(?:src|href)="(/live/[^"]+)"', html)
    assert sorted(loaded) == sorted(f"/live/{name}" for name in ASSETS)
    assert all((STATIC / name).is_file() for name in ASSETS)
    for path in STATIC.iterdir():
        assert not re.search(r"https?://", path.read_text()), f"{path.name} names another origin"


def test_the_wheel_ships_the_static_folder() -> None:
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "reader_api" in wheel["packages"]
    assert not any("static" in rule for rule in wheel.get("exclude", []))
