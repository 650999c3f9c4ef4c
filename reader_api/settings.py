"""Settings of the read API process. Every field is also an environment variable ``HOTBOARD_<NAME>``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    redis: str = Field("redis://127.0.0.1:6379/0", description="Redis URL")
    api_host: str = Field("127.0.0.1", description="Interface the API binds to")
    api_port: int = Field(8000, ge=0, le=65535, description="TCP port of the API")
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
