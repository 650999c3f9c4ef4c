"""The ``/docs`` assets are found in the installed ``docs`` extra without importing it: the package that ships
Swagger UI's files declares Django, and the API must not load a web framework to serve two static files."""

from __future__ import annotations

import subprocess
import sys

FIND = """
import sys
from reader_api import docs
root = docs.asset_dir()
assert root is not None, "the docs extra is installed in dev"
for name in docs.ASSETS:
    assert (root / name).stat().st_size > 0, name
assert "django" not in sys.modules and "drf_spectacular_sidecar" not in sys.modules, sorted(sys.modules)
"""


def test_assets_are_found_without_importing_their_package() -> None:
    result = subprocess.run([sys.executable, "-c", FIND], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
