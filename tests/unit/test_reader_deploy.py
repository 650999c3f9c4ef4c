"""The API's client-facing limits are set in both deploy paths, alike, and are valid settings (no ingress is
assumed in front, so these are the only limits a client meets)."""

from __future__ import annotations

from pathlib import Path

import yaml

from reader_api.settings import ApiSettings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LIMITS = {
    "HOTBOARD_API_MAX_REQUEST_LINE_BYTES",
    "HOTBOARD_API_MAX_HEADER_BYTES",
    "HOTBOARD_API_MAX_HEADERS",
    "HOTBOARD_API_HEAD_TIMEOUT_S",
    "HOTBOARD_API_KEEP_ALIVE_S",
    "HOTBOARD_API_MAX_CONNECTIONS",
    "HOTBOARD_API_RETRY_AFTER_S",
}


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


def test_metrics_are_off_the_client_port_in_both_deploys() -> None:
    """Prometheus scrapes the API on a port of its own; the client port (the Service's) never serves /metrics."""
    k8s, compose = api_env()
    for env in (k8s, compose):
        assert env["HOTBOARD_API_METRICS_HOST"] == "0.0.0.0"
        settings = ApiSettings.model_validate(
            {"api_port": env["HOTBOARD_API_PORT"], "api_metrics_port": env["HOTBOARD_API_METRICS_PORT"]}
        )
        assert settings.api_metrics_port not in (0, settings.api_port)
    assert k8s["HOTBOARD_API_METRICS_PORT"] == compose["HOTBOARD_API_METRICS_PORT"]


def _rules(line: str) -> list[str]:
    """An ACL rule list without its password (``>...``) and user name."""
    return [r for r in line.split()[2:] if not r.startswith(">")]


def test_the_api_logs_in_as_a_read_only_redis_user_in_both_deploys() -> None:
    """The user the API's URL names may read and run scripts, never write: the same rules in the Kubernetes
    instructions and in the compose stack's ACL file (tests/integration/test_reader_readonly.py runs the API on
    them against a real redis-server)."""
    readme = (DEPLOY / "k8s" / "README.md").read_text()
    setuser = [line.strip() for line in readme.splitlines() if line.strip().startswith("ACL SETUSER hotboard-api ")]
    k8s_line, cluster_line = setuser  # one Redis, then a Redis Cluster
    acl = (DEPLOY / "compose" / "secrets" / "redis-users.acl").read_text().splitlines()
    (compose_line,) = [line for line in acl if line.startswith("user hotboard-api ")]
    read_only = ["on", "~hb:*", "+@read", "+@scripting", "-@write"]
    assert _rules(k8s_line.removeprefix("ACL ")) == read_only  # "SETUSER hotboard-api rules..."
    assert _rules(compose_line) == read_only
    # on a Redis Cluster, what redis-py's cluster client sends (tests/integration/test_cluster_readonly_user.py)
    cluster_extra = ["+cluster|slots", "+command", "+readonly", "+asking"]
    assert _rules(cluster_line.removeprefix("ACL ")) == [*read_only, *cluster_extra]
    for rule in cluster_extra:
        assert f"- `{rule}`: " in readme, rule  # each one's reason
    assert (DEPLOY / "compose" / "secrets" / "redis-api-url").read_text().startswith("redis://hotboard-api:")
    assert "api-url='redis://hotboard-api:" in readme
