"""Static checks of deploy/: no Docker engine or cluster needed (CI has neither).

The compose file goes through ``docker compose config -q`` when the CLI has the compose plugin, and through a
structure check always; the Kubernetes base through ``kubectl kustomize`` when kubectl is there, and a parse
and cross-check of every manifest always; the Grafana dashboard and the Prometheus files are checked for
shape here and against a real Prometheus in tests/integration/test_prometheus.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import hotboard

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
K8S = DEPLOY / "k8s"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "hotboard.json"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

#: Partitions of the score topic: compose creates them, KEDA caps the workers at this count.
PARTITIONS = 8
WORKER_PORT = 9100
API_PORT = 8000
API_METRICS_PORT = 9102
WORKERS = ("worker-1", "worker-2", "worker-3")


def version() -> str:
    """The package's version, defined once in pyproject.toml; the installed metadata must agree with it."""
    declared = str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])
    assert hotboard.__version__ == declared, "reinstall (./dev install) after changing the version"
    return declared


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in manifests() if doc["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out += panel.get("panels", [])  # collapsed rows keep their panels inside
    return out


# ------------------------------------------------------------------------------------------------ Dockerfile


def test_dockerfile_is_multi_stage_non_root_with_hotboard_entrypoint() -> None:
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, flags=re.M)
    assert len(froms) >= 2, "multi-stage build expected"
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert all(f == "${PYTHON_IMAGE}" for f in froms)
    assert re.search(r"pip install .*\s\.\s", text), "installs the project from the repo root context"
    # dependencies come from the lock, copied (and installed) before the source so that layer is cached
    lock = text.index("COPY requirements/prod.txt")
    assert "--require-hashes -r requirements/prod.txt" in text
    assert lock < text.index("COPY . /src")
    assert re.search(r"pip install .*--no-deps \.\s", text), "the project adds nothing the lock lacks"
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert users, "runs as a non-root user"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r'^ENTRYPOINT \["hotboard"\]$', text, flags=re.M)
    exposed = {int(p) for line in re.findall(r"^EXPOSE\s+(.+)$", text, flags=re.M) for p in line.split()}
    assert {WORKER_PORT, API_PORT, API_METRICS_PORT} <= exposed
    assert f"HOTBOARD_API_METRICS_PORT={API_METRICS_PORT}" in text


# ------------------------------------------------------------------------------------------------ compose


def has_compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def test_compose_config_with_docker_cli() -> None:
    if not has_compose_plugin():
        pytest.skip("the docker CLI has no compose plugin here; the structure tests below cover the file")
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "--profile", "load", "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_compose_services_images_and_ports() -> None:
    services = compose()["services"]
    assert set(services) >= {"kafka", "kafka-init", "redis", *WORKERS, "api", "loadgen", "prometheus", "grafana"}
    image = "hotboard:local"  # built by compose itself; a release tags the image with version()
    for name in (*WORKERS, "api", "loadgen"):
        svc = services[name]
        assert svc["image"] == image, name
        assert svc["build"] == {"context": "../..", "dockerfile": "deploy/docker/Dockerfile"}, name
        assert (COMPOSE.parent / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka-init"]["image"] == services["kafka"]["image"]
    assert services["redis"]["image"].startswith("redis:7")
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for svc in services.values():  # every published port is on loopback only
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port
    assert "127.0.0.1:8000:8000" in services["api"]["ports"]


def test_compose_workers_settings_and_graceful_stop() -> None:
    services = compose()["services"]
    for name in WORKERS:
        svc = services[name]
        assert svc["command"] == ["worker"]
        env = svc["environment"]
        assert env["HOTBOARD_KAFKA"] == "kafka:9092"
        assert env["HOTBOARD_TOPIC"] == "scores"
        assert int(env["HOTBOARD_METRICS_PORT"]) == WORKER_PORT
        assert svc["stop_grace_period"] == "30s"
    api = services["api"]
    assert api["command"] == ["api"]
    assert api["environment"]["HOTBOARD_API_HOST"] == "0.0.0.0"
    assert int(api["environment"]["HOTBOARD_API_PORT"]) == API_PORT


def test_compose_kafka_kraft_and_topics_created_at_start() -> None:
    services = compose()["services"]
    env = services["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    init = "\n".join(services["kafka-init"]["command"])
    assert re.search(rf"--create --if-not-exists --topic scores --partitions {PARTITIONS}\b", init)
    assert "--topic scores.dlq" in init
    assert services["kafka-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_compose_redis_aof_everysec() -> None:
    command = compose()["services"]["redis"]["command"]
    joined = " ".join(command)
    assert "--appendonly yes" in joined
    assert "--appendfsync everysec" in joined


SECRETS = COMPOSE.parent / "secrets"


def acl_users() -> dict[str, list[str]]:
    """The compose Redis's users (``user NAME RULES...`` lines of its ACL file)."""
    lines = (SECRETS / "redis-users.acl").read_text().splitlines()
    return {line.split()[1]: line.split()[2:] for line in lines if line.strip()}


def test_compose_redis_requires_a_user_and_hotboard_reads_its_url_from_a_secret() -> None:
    """No Redis URL (a password) in the compose file or any environment: each hotboard service reads its own
    URL from a compose secret, and logs in as its own user; unauthenticated clients may only PING."""
    config = compose()
    services, secrets = config["services"], config["secrets"]
    redis = services["redis"]
    assert "--aclfile /run/secrets/redis-users.acl" in " ".join(redis["command"])
    assert redis["secrets"] == ["redis-users.acl"]
    assert "redis://" not in COMPOSE.read_text(), "a Redis URL inline"
    users = acl_users()
    assert users["default"] == ["on", "nopass", "-@all", "+ping"]  # the healthcheck's PING, nothing else
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name, (secret, user) in {
        **dict.fromkeys(WORKERS, ("redis-worker-url", "hotboard-worker")),
        "api": ("redis-api-url", "hotboard-api"),
    }.items():
        svc = services[name]
        assert "HOTBOARD_REDIS" not in svc["environment"], name
        assert svc["secrets"] == [secret], name
        shell = svc["entrypoint"]
        assert shell[:2] == ["/bin/sh", "-c"] and shell[3] == "hotboard", name
        assert f'HOTBOARD_REDIS="$$(cat /run/secrets/{secret})" exec hotboard "$$@"' == shell[2], name
        assert (COMPOSE.parent / secrets[secret]["file"]).resolve() == (SECRETS / secret).resolve()
        url = (SECRETS / secret).read_text().strip()
        login, _, host = url.removeprefix("redis://").partition("@")
        user_name, _, password = login.partition(":")
        assert (user_name, host) == (user, "redis:6379/0"), name
        assert f">{password}" in users[user], f"{secret}'s password is not {user}'s"
    assert users["hotboard-worker"][2:] == ["~hb:*", "+@all"]


def test_compose_depends_on_and_healthchecks() -> None:
    services = compose()["services"]
    for name in ("kafka", "redis", *WORKERS, "api", "prometheus", "grafana"):
        check = services[name].get("healthcheck")
        assert check and check["test"], f"{name} has no healthcheck"
    for name in WORKERS:
        deps = services[name]["depends_on"]
        assert deps["kafka-init"]["condition"] == "service_completed_successfully"
        assert deps["redis"]["condition"] == "service_healthy"
        assert f"127.0.0.1:{WORKER_PORT}/healthz" in " ".join(services[name]["healthcheck"]["test"])
    assert services["api"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    # every depends_on names a service that exists
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in services, f"{name} depends on unknown {dep}"


def test_compose_load_generator_is_an_opt_in_profile() -> None:
    services = compose()["services"]
    load = services["loadgen"]
    assert load["profiles"] == ["load"]
    command = load["command"]
    assert command[0] == "produce"
    assert command[command.index("--kafka") + 1] == "kafka:9092"
    assert float(command[command.index("--rate") + 1]) == 2000
    assert int(command[command.index("--count") + 1]) == 100_000_000
    assert all("profiles" not in svc for name, svc in services.items() if name not in ("loadgen", "audit"))


def test_compose_archiver_beside_its_postgres_and_an_audit_profile() -> None:
    doc = compose()
    services = doc["services"]
    pg, archiver, audit = services["postgres"], services["archiver"], services["audit"]
    assert pg["image"].startswith("postgres:")
    assert pg["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres-password"
    assert "pg_isready" in pg["healthcheck"]["test"] and "ports" not in pg, "PostgreSQL stays inside the stack"
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert archiver["command"] == ["archiver"] and audit["command"] == ["audit"] and audit["profiles"] == ["audit"]
    for svc in (archiver, audit):
        assert svc["image"] == "hotboard:local"
        assert set(svc["secrets"]) == {"redis-worker-url", "postgres-url"}
        assert "HOTBOARD_POSTGRES" not in svc["environment"], "the URL holds a password: a secret, not the env"
        script = svc["entrypoint"][2]
        assert "/run/secrets/postgres-url" in script and "/run/secrets/redis-worker-url" in script
        assert "exec hotboard" in script
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert int(archiver["environment"]["HOTBOARD_WINDOW_MS"]) == 5000
    assert archiver["environment"]["HOTBOARD_GROUP"] == services["worker-1"]["environment"]["HOTBOARD_GROUP"]
    assert f"127.0.0.1:{WORKER_PORT}/healthz" in " ".join(archiver["healthcheck"]["test"])
    for name in ("postgres-password", "postgres-url"):
        assert (COMPOSE.parent / doc["secrets"][name]["file"]).is_file()
    password = (COMPOSE.parent / "secrets" / "postgres-password").read_text().strip()
    assert f":{password}@postgres:5432/" in (COMPOSE.parent / "secrets" / "postgres-url").read_text()
    assert "postgres-data" in doc["volumes"]


def test_compose_mounts_prometheus_and_grafana_config() -> None:
    services = compose()["services"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in services["prometheus"]["volumes"] if v.startswith("..")}
    assert (COMPOSE.parent / "../prometheus").resolve() == PROMETHEUS.parent
    assert mounts["../prometheus"] == "/etc/prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    gmounts = {v.split(":")[0]: v.split(":")[1] for v in services["grafana"]["volumes"] if v.startswith("..")}
    assert gmounts["../grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/hotboard.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == gmounts["../grafana/dashboards"]
    datasource = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (ds,) = datasource["datasources"]
    assert ds["uid"] == "prometheus"
    assert ds["type"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"


# ------------------------------------------------------------------------------------------------ prometheus


def test_prometheus_scrapes_every_worker_and_the_api() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {j: [t for sc in job["static_configs"] for t in sc["targets"]] for j, job in jobs.items()}
    assert sorted(targets["hotboard-worker"]) == [f"{w}:{WORKER_PORT}" for w in WORKERS]
    assert targets["hotboard-api"] == [f"api:{API_METRICS_PORT}"]  # the client port does not serve /metrics
    api = compose()["services"]["api"]
    assert int(api["environment"]["HOTBOARD_API_METRICS_PORT"]) == API_METRICS_PORT
    assert str(API_METRICS_PORT) in api["expose"]
    assert all(str(API_METRICS_PORT) not in str(port) for port in api["ports"]), "/metrics published to the host"
    assert targets["hotboard-archiver"] == [f"archiver:{WORKER_PORT}"]
    # the archiver runs the worker's loop: only its own metrics are kept, or the worker panels would count it
    relabel = jobs["hotboard-archiver"]["metric_relabel_configs"]
    assert relabel[-1] == {"source_labels": ["__name__"], "regex": "hotboard_archive_.*", "action": "keep"}
    assert relabel[0]["replacement"] == "hotboard_archive_windows_total"
    assert config["rule_files"] == ["alerts.yml"]
    services = compose()["services"]
    for target in (*targets["hotboard-worker"], *targets["hotboard-api"], *targets["hotboard-archiver"]):
        assert target.split(":")[0] in services


def test_alert_rules_have_severity_annotations_and_runbook_url() -> None:
    rules = [r for group in yaml.safe_load(ALERTS.read_text())["groups"] for r in group["rules"]]
    names = {r["alert"] for r in rules}
    assert {
        "HotboardConsumerLagGrowing",
        "HotboardFlushFailing",
        "HotboardEventFreshnessHigh",
        "HotboardDeadLetters",
        "HotboardWorkerDown",
        "HotboardSavingsRatioCollapsed",
        "HotboardArchiveLagging",
        "HotboardArchiverDown",
        "HotboardAuditFailed",
        "HotboardAuditUnverified",
        "HotboardAuditStale",
    } <= names
    for rule in rules:
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule["alert"]
        for key in ("summary", "description", "runbook_url"):
            assert rule["annotations"].get(key), f"{rule['alert']} lacks {key}"
        # runbook_url is the annotation Alertmanager and Grafana link; it points at the alert's own section
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://") and url.endswith(f"/docs/runbooks.md#{rule['alert'].lower()}"), url
        assert f"\n## {rule['alert']}\n" in RUNBOOKS.read_text(), f"docs/runbooks.md has no {rule['alert']}"
        assert rule["expr"].strip()
    lag = next(r for r in rules if r["alert"] == "HotboardConsumerLagGrowing")
    assert lag["for"] == "5m"
    fresh = next(r for r in rules if r["alert"] == "HotboardEventFreshnessHigh")
    assert "hotboard_event_freshness_seconds_bucket" in fresh["expr"]
    assert re.search(r">\s*3\s*$", fresh["expr"].strip())


# ------------------------------------------------------------------------------------------------ grafana


def test_dashboard_is_valid_and_every_panel_has_a_query() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "hotboard"
    panels = [p for p in all_panels(dashboard) if p["type"] != "row"]
    assert len(panels) >= 12
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    # The datasource is a template variable (any Prometheus the Grafana has), never a hard-coded uid.
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    chosen = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels:
        assert panel["title"]
        assert panel["datasource"] == chosen, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"panel {panel['title']!r} has an empty query"
            assert target["datasource"] == chosen
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24


def test_dashboard_covers_the_issue_panels() -> None:
    exprs = "\n".join(t["expr"] for p in all_panels(json.loads(DASHBOARD.read_text())) for t in p.get("targets", []))
    for needle in (
        'rate(hotboard_events_total{result="applied"}',
        "rate(hotboard_redis_writes_total",
        "hotboard_write_savings_ratio",
        "hotboard_event_freshness_seconds_bucket",
        "hotboard_flush_seconds_bucket",
        "hotboard_window_entries_bucket",
        "hotboard_consumer_lag",
        "hotboard_rebalances_total",
        "hotboard_dlq_total",
        "hotboard_api_requests_total",
        "hotboard_api_request_seconds_bucket",
        'hotboard_api_cache_total{result="hit"}',
        "hotboard_archive_lag_records",
        "hotboard_archive_last_window_age_seconds",
        "hotboard_archive_windows_total",
        "hotboard_archive_audit_boards_not_exact",
        "hotboard_archive_audit_players_differ",
        "hotboard_archive_audit_awaited_since_timestamp_seconds",
    ):
        assert needle in exprs, needle
    assert "histogram_quantile(0.5," in exprs
    assert "histogram_quantile(0.99," in exprs


# ------------------------------------------------------------------------------------------------ kubernetes


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    (image,) = kustomization["images"]
    assert image["name"] == "hotboard"
    assert image["newTag"] == version()


def test_manifests_parse_and_reference_the_image() -> None:
    docs = manifests()
    assert all({"apiVersion", "kind", "metadata"} <= set(doc) for doc in docs)
    deployments = by_kind("Deployment")
    assert set(deployments) == {"hotboard-worker", "hotboard-api", "hotboard-archiver"}
    for deployment in deployments.values():
        spec = deployment["spec"]
        assert "replicas" not in spec, "the autoscaler owns the replica count"
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        c = container(deployment)
        assert c["image"] == "hotboard"
        assert c["envFrom"] == [{"configMapRef": {"name": "hotboard-config"}}]
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
    assert container(deployments["hotboard-worker"])["args"] == ["worker"]
    assert container(deployments["hotboard-api"])["args"] == ["api"]
    assert container(deployments["hotboard-archiver"])["args"] == ["archiver"]


def test_worker_deployment_probes_and_graceful_shutdown() -> None:
    worker = by_kind("Deployment")["hotboard-worker"]
    pod = worker["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 30
    config = by_kind("ConfigMap")["hotboard-config"]["data"]
    assert float(config["HOTBOARD_SHUTDOWN_TIMEOUT_S"]) <= 10 < pod["terminationGracePeriodSeconds"]
    c = container(worker)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": WORKER_PORT}
    assert redis_url_source(worker) == {"secretKeyRef": {"name": "hotboard-redis", "key": "worker-url"}}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["startupProbe"]["httpGet"]["port"] == "metrics"
    assert worker["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    annotations = worker["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(WORKER_PORT)


def test_api_deployment_service_and_hpa() -> None:
    api = by_kind("Deployment")["hotboard-api"]
    c = container(api)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": API_PORT, "metrics": API_METRICS_PORT}
    assert api["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(API_METRICS_PORT)
    assert redis_url_source(api) == {"secretKeyRef": {"name": "hotboard-redis", "key": "api-url"}}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["resources"]["requests"]["cpu"], "a CPU HPA needs CPU requests"
    service = by_kind("Service")["hotboard-api"]
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]  # /metrics is not for clients
    hpa = by_kind("HorizontalPodAutoscaler")["hotboard-api"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hotboard-api"}
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_keda_scales_workers_on_lag_up_to_the_partition_count() -> None:
    (scaled,) = by_kind("ScaledObject").values()
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == "hotboard-worker"
    assert spec["maxReplicaCount"] == PARTITIONS
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    config = by_kind("ConfigMap")["hotboard-config"]["data"]
    assert meta["consumerGroup"] == config["HOTBOARD_GROUP"]
    assert meta["topic"] == config["HOTBOARD_TOPIC"]
    assert int(meta["lagThreshold"]) > 0
    # KEDA resolves bootstrapServers from its own namespace: the same host as the kafka ExternalName
    kafka = by_kind("Service")["kafka"]["spec"]
    assert meta["bootstrapServers"] == f"{kafka['externalName']}:{kafka['ports'][0]['port']}"
    # and the compose stack creates the topic with the same partition count
    assert f"--partitions {spec['maxReplicaCount']}" in "\n".join(compose()["services"]["kafka-init"]["command"])


def test_kafka_and_redis_are_external_services() -> None:
    services = by_kind("Service")
    config = by_kind("ConfigMap")["hotboard-config"]["data"]
    for name in ("kafka", "redis", "postgres"):
        assert services[name]["spec"]["type"] == "ExternalName"
    kafka_host, kafka_port = config["HOTBOARD_KAFKA"].split(":")
    assert kafka_host == "kafka"
    assert int(kafka_port) == services["kafka"]["spec"]["ports"][0]["port"]
    assert "HOTBOARD_REDIS" not in config, "the Redis URL holds a password: Secret hotboard-redis, not a ConfigMap"
    assert "HOTBOARD_REDIS_PASSWORD" not in config, "Redis credentials come from a Secret, never the ConfigMap"
    assert not [v for v in config.values() if re.search(r"://[^/\s]*@", str(v))], "a URL with credentials"
    assert not by_kind("Secret"), "no credentials in the base: the Secret is created per cluster (README.md)"
    assert int(config["HOTBOARD_METRICS_PORT"]) == WORKER_PORT
    assert int(config["HOTBOARD_API_PORT"]) == API_PORT
    assert int(config["HOTBOARD_API_METRICS_PORT"]) == API_METRICS_PORT
    readme = (K8S / "README.md").read_text()
    assert "kubectl create secret generic hotboard-redis" in readme
    assert "--from-literal=worker-url=" in readme and "--from-literal=api-url=" in readme
    assert "kubectl create secret generic hotboard-postgres" in readme and "@postgres:5432/" in readme


def test_archiver_deployment_reads_the_archive_url_from_a_secret() -> None:
    deployment = by_kind("Deployment")["hotboard-archiver"]
    c = container(deployment)
    env = {e["name"]: e for e in c["env"]}
    assert env["HOTBOARD_POSTGRES"]["valueFrom"]["secretKeyRef"] == {"name": "hotboard-postgres", "key": "url"}
    assert redis_url_source(deployment)["secretKeyRef"] == {"name": "hotboard-redis", "key": "worker-url"}
    assert int(env["HOTBOARD_WINDOW_MS"]["value"]) == 5000
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": WORKER_PORT}
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30


def redis_url_source(deployment: dict[str, Any]) -> dict[str, Any]:
    (entry,) = [e for e in container(deployment).get("env", []) if e["name"] == "HOTBOARD_REDIS"]
    assert "value" not in entry
    return dict(entry["valueFrom"])


def test_no_pod_gets_a_service_account_token() -> None:
    for name, deployment in by_kind("Deployment").items():
        assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, name


PROMETHEUS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
DNS = {("UDP", 53), ("TCP", 53)}


def _ports(rule: dict[str, Any]) -> set[tuple[str, int | str]]:
    return {(p["protocol"], p["port"]) for p in rule["ports"]}


def _policy_for(component: str) -> dict[str, Any]:
    deployment = by_kind("Deployment")[f"hotboard-{component}"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (policy,) = [
        p
        for p in by_kind("NetworkPolicy").values()
        if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"], "a missing type allows everything"
    named = {p["name"] for p in container(deployment)["ports"]}
    for rule in policy["spec"]["ingress"]:
        assert {port for _, port in _ports(rule) if isinstance(port, str)} <= named, "a port the pod does not name"
    return dict(policy["spec"])


def _egress(spec: dict[str, Any]) -> dict[tuple[str, int | str], list[dict[str, Any]]]:
    out: dict[tuple[str, int | str], list[dict[str, Any]]] = {}
    for rule in spec["egress"]:
        assert rule.get("to"), "egress to anywhere"
        for port in _ports(rule):
            out[port] = rule["to"]
    return out


def _namespace(peers: list[dict[str, Any]]) -> str:
    (peer,) = peers
    return str(peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"])


def test_network_policy_of_the_workers() -> None:
    """Workers: in, only Prometheus on the ops port; out, only Kafka, Redis and DNS."""
    spec = _policy_for("worker")
    ((rule),) = spec["ingress"]
    assert rule["from"] == [PROMETHEUS_PEER] and _ports(rule) == {("TCP", "metrics")}
    egress = _egress(spec)
    assert set(egress) == {("TCP", 9092), ("TCP", 6379), *DNS}
    assert _namespace(egress["TCP", 9092]) == "kafka" and _namespace(egress["TCP", 6379]) == "redis"
    assert _namespace(egress["UDP", 53]) == "kube-system"
    services = by_kind("Service")
    assert services["kafka"]["spec"]["externalName"].split(".")[1] == "kafka"  # the namespaces egress names
    assert services["redis"]["spec"]["externalName"].split(".")[1] == "redis"


def test_network_policy_of_the_archiver() -> None:
    """Archiver: in, only Prometheus on the ops port; out, only Kafka, Redis, PostgreSQL and DNS."""
    spec = _policy_for("archiver")
    ((rule),) = spec["ingress"]
    assert rule["from"] == [PROMETHEUS_PEER] and _ports(rule) == {("TCP", "metrics")}
    egress = _egress(spec)
    assert set(egress) == {("TCP", 9092), ("TCP", 6379), ("TCP", 5432), *DNS}
    assert _namespace(egress["TCP", 5432]) == "postgres"
    assert by_kind("Service")["postgres"]["spec"]["externalName"].split(".")[1] == "postgres"


def test_network_policy_of_the_api() -> None:
    """API: in, clients on its port and Prometheus alone on the metrics port; out, only Redis and DNS."""
    spec = _policy_for("api")
    rules = {frozenset(_ports(rule)): rule for rule in spec["ingress"]}
    assert set(rules) == {frozenset({("TCP", "http")}), frozenset({("TCP", "metrics")})}
    assert "from" not in rules[frozenset({("TCP", "http")})]  # clients, from anywhere
    assert rules[frozenset({("TCP", "metrics")})]["from"] == [PROMETHEUS_PEER]
    egress = _egress(spec)
    assert set(egress) == {("TCP", 6379), *DNS}
    assert _namespace(egress["TCP", 6379]) == "redis"


def test_kustomize_build() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed; the parse tests above cover the manifests")
    result = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    built = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert len(built) == len(manifests())
    deployments = [doc for doc in built if doc["kind"] == "Deployment"]
    images = {c["image"] for doc in deployments for c in doc["spec"]["template"]["spec"]["containers"]}
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert images == {f"{image['newName']}:{image['newTag']}"}


def test_an_hourly_audit_cronjob_with_the_archivers_settings_and_its_network_policy() -> None:
    """The audit the alerts expect (HotboardAuditStale: 3 h): hourly, one at a time, the archiver's Secrets, no
    token, non-root; out only to Kafka, Redis, PostgreSQL and DNS, in from nobody."""
    job = by_kind("CronJob")["hotboard-audit"]
    assert job["spec"]["schedule"].split()[1:] == ["*", "*", "*", "*"]  # every hour
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    template = job["spec"]["jobTemplate"]["spec"]["template"]
    pod = template["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    assert c["image"] == "hotboard" and c["args"] == ["audit"]
    assert c["envFrom"] == [{"configMapRef": {"name": "hotboard-config"}}]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    archiver = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container(by_kind("Deployment")["hotboard-archiver"])["env"]
        if "valueFrom" in e
    }
    assert env == archiver
    labels = template["metadata"]["labels"]
    (policy,) = [
        p
        for p in by_kind("NetworkPolicy").values()
        if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"].get("ingress", []) == []
    egress = _egress(dict(policy["spec"]))
    assert set(egress) == {("TCP", 9092), ("TCP", 6379), ("TCP", 5432), *DNS}
    assert _namespace(egress["TCP", 5432]) == "postgres" and _namespace(egress["TCP", 9092]) == "kafka"
