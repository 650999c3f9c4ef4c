"""The read API's settings for writes over HTTP and for waits: a part of :class:`reader_api.settings.ApiSettings`,
kept apart so the read settings stay one page. ``kafka`` empty means the write endpoints are not served."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from hotboard.kafka_security import KafkaSecuritySettings


class WriteSettings(KafkaSecuritySettings):
    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    kafka: str = Field(
        "", description="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]; set, the API also serves the writes"
    )
    topic: str = Field("scores", description="Topic the workers consume: writes go there, waits read its watermarks")
    api_write_tokens: str = Field(
        "", description="Comma-separated bearer tokens allowed to write; none (and no file) answers writes 403"
    )
    api_write_tokens_file: str = Field("", description="File of bearer tokens allowed to write, one per line")
    api_write_rate: float = Field(1000.0, gt=0, description="Events per second each write token may send")
    api_write_burst: int = Field(2000, ge=1, description="Events a write token may send at once (its bucket size)")
    api_max_body_bytes: int = Field(
        4 << 20, ge=1024, description="Largest write request body; larger gets 413 before it is read"
    )
    api_produce_timeout_s: float = Field(
        10.0, gt=0, description="A write not acknowledged by Kafka in this long answers 503 (outcome unknown)"
    )
    api_wait_ms: int = Field(3000, ge=0, description="Default bound of ?wait=true and ?after= waits")
    api_max_wait_ms: int = Field(30_000, ge=0, description="Largest wait_ms a request may ask for")
    api_wait_poll_ms: int = Field(
        10, ge=1, description="How often one shared poller per waited-on board reads its watermarks"
    )
    api_idempotency_ttl_s: int = Field(
        86_400, ge=1, description="How long the answer to an Idempotency-Key is kept (Redis, and in memory)"
    )
    api_idempotency_max_keys: int = Field(
        100_000, ge=0, description="Idempotency answers kept in memory in front of Redis (LRU)"
    )
