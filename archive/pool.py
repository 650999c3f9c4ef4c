"""The archive's connections: a small asyncpg pool that connects lazily (an archiver starts while PostgreSQL is
down, and waits), migrates the schema on its first connection, and turns a PostgreSQL that is down, restarting
or slow into :class:`ArchiveUnavailable`, which the worker's loop retries with backoff like a Redis outage."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg

from archive import schema


class ArchiveUnavailable(OSError):
    """PostgreSQL cannot be reached, is shutting down or starting, or did not answer in time: passing trouble
    (an OSError, so every retry loop of the worker treats it as it treats a network failure)."""


#: Errors that mean "try again later"; any other PostgreSQL error is a bug and ends the process.
_TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, timed out (TimeoutError is one)
    asyncpg.InterfaceError,  # the connection went away under a call
    asyncpg.PostgresConnectionError,  # class 08
    asyncpg.exceptions.OperatorInterventionError,  # class 57: admin shutdown, cannot connect now
    asyncpg.exceptions.InsufficientResourcesError,  # class 53: too many connections, disk full
    asyncpg.exceptions.TransactionRollbackError,  # class 40: deadlock, serialization failure
)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except ArchiveUnavailable:
        raise
    except _TRANSIENT as exc:
        raise ArchiveUnavailable(f"PostgreSQL unavailable: {exc!r}") from exc


class Archive:
    """``async with Archive(url) as archive``; ``archive.connection()`` yields a connection with the schema
    migrated and the staging table present."""

    def __init__(self, url: str, timeout_s: float = 10.0, max_connections: int = 2) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self._max = max_connections
        self._pool: Any = None
        self._migrated = False

    async def __aenter__(self) -> Archive:
        with translated():
            self._pool = await asyncpg.create_pool(
                self._url,
                min_size=0,
                max_size=self._max,
                timeout=self._timeout_s,
                command_timeout=self._timeout_s,
                init=self._init,
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.terminate()

    async def _init(self, conn: Any) -> None:
        if not self._migrated:
            await schema.migrate(conn)
            self._migrated = True
        await conn.execute(schema.STAGE)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        with translated():
            async with self._pool.acquire(timeout=self._timeout_s) as conn:
                yield conn
