"""The read API's settings for live streams (Server-Sent Events): a part of :class:`reader_api.settings.ApiSettings`."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class StreamSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    api_max_streams: int = Field(
        1000, ge=0, description="Event streams one API process holds open; past it a new stream gets 503"
    )
    api_stream_poll_ms: int = Field(
        100, ge=1, description="How often the one watcher per streamed board reads its version (answers: on a change)"
    )
    api_stream_heartbeat_s: float = Field(15.0, gt=0, description="A comment line on an idle stream this often")
    api_stream_send_timeout_s: float = Field(
        10.0, gt=0, description="A stream whose client takes longer than this to take an event is dropped"
    )
    api_stream_max_s: float = Field(
        3600.0, gt=0, description="A stream ends after this long (the browser reconnects with Last-Event-ID)"
    )
