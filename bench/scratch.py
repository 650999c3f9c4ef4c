"""A throwaway Redis for one benchmark run: on loopback, in a temporary directory, nothing persisted (so no
fsync or rewrite competes with what is measured), stopped when the run ends, whatever way it ends."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from cli.devstack import RedisServer, free_port

T = TypeVar("T")


def on_scratch_redis(run: Callable[[str], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(run(url))`` against a fresh Redis at ``url``."""
    with tempfile.TemporaryDirectory(prefix="hotboard-bench-") as tmp:
        server = RedisServer(free_port(), Path(tmp), appendonly=False)
        server.start()
        try:
            return asyncio.run(run(server.url))
        finally:
            server.stop()
