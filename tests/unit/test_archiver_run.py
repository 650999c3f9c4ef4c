"""The archiver's exit is its worker's: the task that reads the last audit into the gauges neither replaces the
worker's exception (and so the exit code) with its own, nor holds the exit while it winds down. No servers: the
worker's run and the audit read are replaced; the archiver's own ``run`` and ``hotboard archiver``'s
``run_member`` are the code under test."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

import pytest

from archive import audit_log
from archive.archiver import Archiver
from archive.audit_log import LastAudit
from archive.pool import Archive
from archive.settings import ArchiverSettings
from cli.exits import EXIT_UNAVAILABLE
from cli.worker import run_member
from ingest.kafka_config import KafkaUnavailable

#: The exit may take this long at most once the worker has failed.
EXIT_BOUND_S = 5.0


class Wrapped:
    """The archiver as ``run_member`` runs it, without the servers its ``__aenter__`` would reach."""

    def __init__(self, archiver: Archiver) -> None:
        self.archiver = archiver

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        worker = self.archiver.worker
        for client in (worker._consumer, worker._producer):  # never started: stopped so that none warns
            await client.stop()
        await self.archiver._redis.aclose()

    async def run(self) -> None:
        await self.archiver.run()


def make_archiver(read_started: asyncio.Event) -> Archiver:
    """An archiver whose worker fails once the gauge task's first read has begun."""
    settings = ArchiverSettings(
        kafka="127.0.0.1:1", redis="redis://127.0.0.1:1/0", postgres="postgresql://127.0.0.1:1/x", audit_read_s=0.01
    )
    archiver = Archiver(settings, handle_signals=False)

    async def failing_worker() -> None:
        await read_started.wait()
        raise KafkaUnavailable("kafka went away")

    archiver.worker.run = failing_worker  # type: ignore[method-assign]
    return archiver


def run_bounded(
    monkeypatch: pytest.MonkeyPatch, read: Callable[[Archive], Awaitable[LastAudit]]
) -> tuple[int | BaseException | None, float]:
    """``hotboard archiver``'s run with ``read`` as the audit read: (exit code, or what it raised, or None if
    still running after the bound; seconds taken). The archiver is made inside the loop, as aiokafka requires."""
    read_started = asyncio.Event()

    async def reading(archive: Archive) -> LastAudit:
        read_started.set()
        return await read(archive)

    monkeypatch.setattr(audit_log, "last", reading)
    codes: list[int | BaseException] = []

    def target() -> None:
        try:
            codes.append(run_member("archiver", lambda: Wrapped(make_archiver(read_started))))
        except BaseException as exc:  # noqa: BLE001 - what the process would die of: the test's answer
            codes.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=target)
    thread.daemon = True  # the old code hangs here: the thread is left behind, the test fails on the bound
    thread.start()
    thread.join(EXIT_BOUND_S)
    return (codes[0] if codes else None), time.monotonic() - started


def test_a_broken_audit_read_does_not_replace_the_workers_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gauge read fails with an error that is not PostgreSQL being away (a bug, a missing table): the
    archiver still exits 3 for the worker's KafkaUnavailable, not with the gauge task's traceback."""
    reads = 0

    async def broken(archive: Archive) -> LastAudit:
        nonlocal reads
        reads += 1
        raise RuntimeError("relation hb_audits does not exist")

    code, _ = run_bounded(monkeypatch, broken)
    assert code == EXIT_UNAVAILABLE
    assert reads >= 1


def test_a_slow_to_cancel_audit_read_does_not_hold_the_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gauge read is cancelled mid-query and then waits (asyncpg's shielded release of a connection to a
    frozen PostgreSQL): the worker's failure ends the archiver within the bound all the same."""

    async def stuck(archive: Archive) -> LastAudit:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(60)  # what a shielded release waiting on a frozen server does to a cancel
            raise
        raise AssertionError("unreachable")

    code, took_s = run_bounded(monkeypatch, stuck)
    assert code == EXIT_UNAVAILABLE, f"no exit after {took_s:.1f}s"
    assert took_s < EXIT_BOUND_S
