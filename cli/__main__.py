"""``python -m cli``: the ``hotboard`` command where the entry point is not installed (the demo's children)."""

import sys

from cli.main import main

sys.exit(main())
