"""What every process kind shares. Each kind has its own settings object (``ingest.settings``,
``reader_api.settings``); every field is also an environment variable ``HOTBOARD_<NAME>``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LogSettings(BaseSettings):
    """What every ``hotboard`` command shares (``hotboard --log-level L <command>``)."""

    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING or ERROR")
