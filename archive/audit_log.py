"""What audits concluded, kept in the archive: ``hotboard audit`` of every board writes one row per run, and the
archiver reads the last one into its gauges (``hotboard_archive_audit_*``), so a failed or missing audit pages
through Prometheus instead of living only in the exit code of a job nobody watches. An audit of one board
(``--board``) is not recorded: it says nothing about the others."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from archive.pool import Archive


class Audited(Protocol):
    """One board's result, as :class:`archive.audit.BoardAudit` has it."""

    @property
    def players(self) -> int: ...

    @property
    def exact(self) -> bool: ...

    @property
    def differences(self) -> Sequence[object]: ...


@dataclass(frozen=True, slots=True)
class LastAudit:
    """When the last audit of every board finished, how many boards it found not exact, and when the last one
    that found every board exact finished (ms since the epoch; 0: none yet)."""

    finished_at_ms: int = 0
    not_exact: int = 0
    last_success_ms: int = 0


async def record(archive: Archive, results: Sequence[Audited], finished_at_ms: int) -> None:
    async with archive.connection() as conn:
        await conn.execute(
            "INSERT INTO hb_audits (finished_at_ms, boards, players, not_exact, differences) "
            "VALUES ($1, $2, $3, $4, $5)",
            finished_at_ms,
            len(results),
            sum(r.players for r in results),
            sum(not r.exact for r in results),
            sum(len(r.differences) for r in results),
        )


async def last(archive: Archive) -> LastAudit:
    async with archive.connection() as conn:
        row = await conn.fetchrow(
            "SELECT finished_at_ms, not_exact, "
            "(SELECT max(finished_at_ms) FROM hb_audits WHERE not_exact = 0) AS success "
            "FROM hb_audits ORDER BY id DESC LIMIT 1"
        )
    if row is None:
        return LastAudit()
    return LastAudit(row["finished_at_ms"], row["not_exact"], row["success"] or 0)
