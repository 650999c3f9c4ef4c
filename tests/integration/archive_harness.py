"""What the archive tests share: the archive's totals read back, waited on against a reference, and the
archiver as a real OS process (to SIGKILL it) beside the worker processes of tests/integration/harness.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

from tests.integration.harness import Totals, WorkerProcess, diff


def archive_totals(url: str, boards: Iterable[str]) -> Totals:
    """board -> player -> score, as the archive holds them (from any thread)."""
    wanted = list(boards)

    async def read() -> Totals:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            rows = await conn.fetch("SELECT board, player, score FROM hb_scores WHERE board = ANY($1)", wanted)
        except asyncpg.UndefinedTableError:
            rows = []  # the archiver has not created its schema yet
        finally:
            await conn.close()
        out: Totals = {b: {} for b in wanted}
        for r in rows:
            out[r["board"]][r["player"]] = r["score"]
        return out

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


def wait_archived(url: str, expected: Totals, timeout_s: float = 90.0) -> None:
    """Poll until the archive equals the reference, twice a window apart (a double count would overshoot)."""
    deadline = time.monotonic() + timeout_s
    actual: Totals = {}
    while time.monotonic() < deadline:
        actual = archive_totals(url, expected)
        if actual == expected:
            time.sleep(2.0)
            actual = archive_totals(url, expected)
            if actual == expected:
                return
        time.sleep(0.5)
    raise AssertionError(f"archive not exact after {timeout_s:.0f}s: {diff(expected, actual)}")


def archiver_process(
    kafka: str,
    redis_url: str,
    postgres_url: str,
    topic: str,
    group: str,
    log_dir: Path,
    name: str = "archiver",
    extra_env: dict[str, str] | None = None,
) -> WorkerProcess:
    """``hotboard archiver`` as an OS process (1 s windows, so a test sees many of them)."""
    return WorkerProcess(
        kafka=kafka,
        redis_url=redis_url,
        topic=topic,
        group=group,
        log_dir=log_dir,
        name=name,
        window_ms=1000,
        extra_env={
            "HOTBOARD_POSTGRES": postgres_url,
            "HOTBOARD_BACKOFF_MAX_S": "1",
            "HOTBOARD_POSTGRES_TIMEOUT_S": "3",
            **(extra_env or {}),
        },
        command="archiver",
    )
