"""Settings of the read API process. Every field is also an environment variable ``HOTBOARD_<NAME>``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from hotboard.redis_connect import RedisSettings
from reader_api.stream_settings import StreamSettings
from reader_api.write_settings import WriteSettings


class ApiSettings(StreamSettings, WriteSettings, RedisSettings):
    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    api_read_from: Literal["master", "replica"] = Field(
        "master",
        description="On a Redis Cluster, answer from the masters or spread reads over their replicas (each answer "
        "one snapshot, maybe a little older: as_of and version say how fresh)",
    )
    api_host: str = Field("127.0.0.1", description="Interface the API binds to")
    api_port: int = Field(8000, ge=0, le=65535, description="TCP port of the API")
    api_metrics_port: int = Field(
        9102, ge=0, le=65535, description="Port of the API's Prometheus /metrics, never the client port; 0 turns it off"
    )
    api_metrics_host: str = Field("127.0.0.1", description="Interface the API's /metrics port binds to")
    api_cache_size: int = Field(
        1024, ge=0, description="Top pages kept in the process (LRU, keyed by board version); 0 turns the cache off"
    )
    api_cache_max_bytes: int = Field(64 << 20, ge=0, description="Upper bound on the bytes the cached pages hold")
    api_redis_timeout_s: float = Field(
        1.0, gt=0, description="Connect and read timeout towards Redis; past it a request answers 503"
    )
    api_redis_max_connections: int = Field(64, ge=1, description="Connections in the pool towards Redis")
    api_retry_after_s: int = Field(1, ge=0, description="Retry-After sent with a 503 while Redis is away")
    api_log_level: str = Field("info", description="uvicorn log level")
    # Limits towards clients: the API is assumed to face them with no proxy in front.
    api_max_request_line_bytes: int = Field(
        8192, ge=256, description="Longest request line (method, path, query); longer gets 414"
    )
    api_max_header_bytes: int = Field(8192, ge=256, description="Largest header block; larger gets 431")
    api_max_headers: int = Field(100, ge=1, description="Most header fields in one request; more gets 431")
    api_head_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A request head must be complete this long after the connection opened or the "
        "previous response; else 408 (or a silent close when nothing was sent)",
    )
    api_keep_alive_s: int = Field(5, ge=1, description="An idle keep-alive connection is closed after this long")
    api_max_connections: int = Field(
        1000, ge=2, description="Open connections (and requests in flight) beyond which requests get 503"
    )
    api_http: Literal["bounded", "httptools", "h11"] = Field(
        "bounded",
        description="HTTP/1.1 protocol: bounded (uvicorn httptools with the limits above); httptools = stock uvicorn "
        "httptools with none of them, h11 = stock uvicorn h11; both for benchmarks only",
    )
