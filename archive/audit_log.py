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
    """When the last audit of every board finished, how many boards it found not exact and how many players
    differ (``DIFFERS``; the other boards not exact were unverified), how many audits in a row up to it found a
    board not exact, and when the last one that found every board exact finished (ms since the epoch; 0: none yet).

    A board not exact on one run alone may be one the audit could not verify for a passing reason (a board whose
    first window the archive has not written yet while Kafka no longer starts at 0, a player whose events in
    between were on two partitions moving opposite ways); a player that differs is a difference between two
    consistent snapshots carried to the same offsets, not a race. The alerts page on the latter, or on the former
    twice running (deploy/prometheus/alerts.yml)."""

    finished_at_ms: int = 0
    not_exact: int = 0
    last_success_ms: int = 0
    differences: int = 0
    runs_not_exact: int = 0
    #: When the archive was made (ms since the epoch; 0: unknown): an audit is due from then until one ran.
    due_since_ms: int = 0


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
            "SELECT finished_at_ms, not_exact, differences, "
            "(SELECT max(finished_at_ms) FROM hb_audits WHERE not_exact = 0) AS success, "
            "(SELECT count(*) FROM hb_audits WHERE id > "
            "  coalesce((SELECT max(id) FROM hb_audits WHERE not_exact = 0), 0)) AS runs "
            "FROM hb_audits ORDER BY id DESC LIMIT 1"
        )
        due = await conn.fetchval("SELECT min(since_ms) FROM hb_audit_due")
    if row is None:
        return LastAudit(due_since_ms=due or 0)
    return LastAudit(
        row["finished_at_ms"], row["not_exact"], row["success"] or 0, row["differences"], row["runs"], due or 0
    )
