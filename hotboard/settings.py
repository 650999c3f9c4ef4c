"""What every process kind shares. Each kind has its own settings object (``ingest.settings``,
``reader_api.settings``); every field is also an environment variable ``HOTBOARD_<NAME>``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LogSettings(BaseSettings):
    """What every ``hotboard`` command shares (``hotboard --log-level L --log-format F <command>``)."""

    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING or ERROR")
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines: text, or json (one object per line: level, logger, message, fields)"
    )
