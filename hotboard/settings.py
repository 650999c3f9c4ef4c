"""One settings object per process kind. Every field is also an environment variable ``HOTBOARD_<NAME>``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LogSettings(BaseSettings):
    """What every ``hotboard`` command shares (``hotboard --log-level L <command>``)."""

    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING or ERROR")


class WorkerSettings(LogSettings):
    """``hotboard worker``: the CLI options are generated from these fields (:mod:`hotboard.settings_cli`)."""

    kafka: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]")
    redis: str = Field("redis://127.0.0.1:6379/0", description="Redis URL")
    topic: str = Field("scores", description="Topic the score events arrive on")
    group: str = Field("hotboard", description="Kafka consumer group shared by all workers")
    window_ms: int = Field(1000, ge=10, le=60_000, description="Length of one aggregation window")
    dlq_topic: str = Field("", description="Dead-letter topic; empty means '<topic>.dlq'")
    metrics_port: int = Field(9100, ge=0, le=65535, description="Prometheus /metrics port; 0 turns it off")
    metrics_host: str = Field("0.0.0.0", description="Interface the ops endpoint (/metrics, probes) binds to")
    ops_timeout_s: float = Field(5.0, gt=0, description="Ops endpoint: a connection idle this long is closed")
    max_pending_entries: int = Field(
        2_000_000, ge=1, description="Pending board-player pairs above which fetching pauses until a flush lands"
    )
    session_timeout_ms: int = Field(10_000, ge=1000, description="Kafka consumer session timeout")
    max_poll_records: int = Field(5000, ge=1, description="Records taken from Kafka per fetch call")
    max_partition_fetch_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Bytes fetched per partition per request"
    )
    fetch_max_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Bytes fetched per request")
    kafka_start_timeout_s: float = Field(30.0, gt=0, description="How long to wait for Kafka at start")
    shutdown_timeout_s: float = Field(8.0, gt=0, description="Budget for the final flush after SIGTERM")
    backoff_max_s: float = Field(5.0, gt=0, description="Cap of the retry backoff while Redis fails")
    redis_timeout_s: float = Field(
        5.0, gt=0, description="Redis socket timeout: a silent Redis fails a flush after this"
    )
    max_script_players: int = Field(
        5_000, ge=100, description="Players per flush script (a script blocks Redis while it runs: keep it short)"
    )
    dlq_max_bytes: int = Field(
        131_072,
        ge=8192,
        description="Cap of one dead letter (key, value, headers); the rest is cut, size and digest kept",
    )
    dlq_send_timeout_s: float = Field(10.0, gt=0, description="Wait for DLQ acknowledgements per flush")
    max_pending_dlq_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Unacknowledged dead-letter bytes above which fetching pauses"
    )
    revoke_flush_timeout_s: float = Field(3.0, gt=0, description="Budget of the flush before giving partitions up")
    halt_recheck_s: float = Field(30.0, gt=0, description="How often a halted partition is checked again")

    @property
    def dlq(self) -> str:
        return self.dlq_topic or f"{self.topic}.dlq"

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000
