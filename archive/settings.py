"""The archiver's settings: the worker's (it runs the worker's fold and flush order), with its own defaults and
the archive's URL. Every field is also an environment variable ``HOTBOARD_<NAME>`` and an option of
``hotboard archiver``."""

from __future__ import annotations

from pydantic import Field

from ingest.settings import WorkerSettings


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
