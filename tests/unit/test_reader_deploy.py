"""The API's client-facing limits are set in both deploy paths, alike, and are valid settings (no ingress is
assumed in front, so these are the only limits a client meets)."""

from __future__ import annotations

from pathlib import Path

import yaml

from reader_api.settings import ApiSettings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LIMITS = {
    "HOTBOARD_API_MAX_REQUEST_LINE_BYTES", "HOTBOARD_API_MAX_HEADER_BYTES", "HOTBOARD_API_MAX_HEADERS",
    "HOTBOARD_API_HEAD_TIMEOUT_S", "HOTBOARD_API_KEEP_ALIVE_S", "HOTBOARD_API_MAX_CONNECTIONS",
    "HOTBOARD_API_RETRY_AFTER_S",
}  # fmt: skip


def api_env() -> tuple[dict[str, str], dict[str, str]]:
    configmap = yaml.safe_load((DEPLOY / "k8s" / "configmap.yaml").read_text())["data"]
    compose = yaml.safe_load((DEPLOY / "compose" / "docker-compose.yml").read_text())["services"]["api"]
    return configmap, compose["environment"]


def test_both_deploys_set_the_same_limits() -> None:
    k8s, compose = api_env()
    assert {k: k8s[k] for k in LIMITS} == {k: compose[k] for k in LIMITS}


def test_the_limits_are_valid_settings() -> None:
    k8s, _ = api_env()
    fields = {name.removeprefix("HOTBOARD_").lower(): k8s[name] for name in LIMITS}
    settings = ApiSettings.model_validate(fields)
    assert settings.api_http == "bounded"
    assert set(fields) <= set(ApiSettings.model_fields)
