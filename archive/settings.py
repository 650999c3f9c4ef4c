"""The archiver's settings: the worker's (it runs the worker's fold and flush order), with its own defaults and
the archive's URL; and the audit's, the archiver's plus its snapshot timeout. Every field is also an environment
variable ``HOTBOARD_<NAME>`` and an option of ``hotboard archiver`` (``hotboard audit`` takes some of them)."""

from __future__ import annotations

from pydantic import Field

from ingest.settings import WorkerSettings

#: How long one board's snapshot read may take on each side (its one MULTI in Redis, its one SELECT in
#: PostgreSQL), in place of the short Redis and PostgreSQL timeouts every other call keeps: it grows with the
#: board (a million players take about 5-15 s to read here, past the 5 s ``--redis-timeout-s``). A server silent
#: before the read is found by the short timeouts of the calls before it (a connection is made within them too);
#: one that falls silent during the read, after this long.
SNAPSHOT_TIMEOUT_S = 300.0


class ArchiverSettings(WorkerSettings):
    """``hotboard archiver``: every worker setting, plus these (docs/configuration.md)."""

    postgres: str = Field("postgresql://127.0.0.1:5432/hotboard", description="PostgreSQL URL of the archive")
    archive_group: str = Field("", description="Consumer group of the archivers; empty means '<group>-archive'")
    window_ms: int = Field(5000, ge=10, le=60_000, description="Length of one archive window (one transaction)")
    metrics_port: int = Field(9102, ge=0, le=65535, description="Prometheus /metrics port; 0 turns it off")
    max_script_players: int = Field(
        1_000_000, ge=100, description="Players per board batch (one COPY holds every batch of a window)"
    )
    audit_read_s: float = Field(
        30.0, gt=0, description="How often the last audit's outcome is read from the archive for the audit gauges"
    )
    postgres_timeout_s: float = Field(
        10.0, gt=0, description="PostgreSQL connect and statement timeout: a silent server fails a window after this"
    )

    @property
    def consumer_group(self) -> str:
        return self.archive_group or f"{self.group}-archive"


class AuditSettings(ArchiverSettings):
    """``hotboard audit``: the archiver's settings it takes (:data:`cli.audit.OPTIONS`), plus this one."""

    snapshot_timeout_s: float = Field(
        SNAPSHOT_TIMEOUT_S,
        gt=0,
        description="Read timeout of each board's snapshot, in Redis and in PostgreSQL (it grows with the board); "
        "every other call keeps --redis-timeout-s and --postgres-timeout-s",
    )
