"""Every ``HOTBOARD_*`` variable deploy/ hands a hotboard process is a setting of the command it runs, and its
value passes that command's validation: a misspelt name (pydantic-settings ignores unknown variables) or an
out-of-range value fails here, not silently in production. Compose: each service's ``command`` (its entrypoint
sets the secrets' variables); Kubernetes: each container's ``args``, the ConfigMap it loads and its own ``env``."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from archive.settings import ArchiverSettings
from hotboard.settings import LogSettings
from ingest.settings import WorkerSettings
from reader_api.settings import ApiSettings
from tests.unit.test_deploy_static import COMPOSE, compose, manifests

#: command -> the settings it reads from the environment; every command reads the global log settings.
#: ``produce`` takes the worker's Kafka settings; ``audit`` constructs the archiver's settings whole.
COMMANDS: dict[str, tuple[type[BaseSettings], ...]] = {
    "worker": (WorkerSettings, LogSettings),
    "archiver": (ArchiverSettings, LogSettings),
    "audit": (ArchiverSettings, LogSettings),
    "api": (ApiSettings, LogSettings),
    "produce": (WorkerSettings, LogSettings),
}
PREFIX = "HOTBOARD_"


def names(*classes: type[BaseSettings]) -> set[str]:
    return {PREFIX + name.upper() for cls in classes for name in cls.model_fields}


def check(
    command: str, env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch, known: Collection[str] | None = None
) -> None:
    """Each name of ``env`` is one of ``command``'s settings (or of ``known``), and ``env`` validates as them."""
    classes = COMMANDS[command]
    unknown = sorted(name for name in env if name not in (names(*classes) if known is None else known))
    assert not unknown, f"not settings of hotboard {command}: {unknown}"
    for name in [n for n in os.environ if n.startswith(PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for cls in classes:
        cls()  # pydantic's ValidationError, naming the setting, when a value does not validate


def compose_services() -> list[Any]:
    """(service, command, its environment) of every service that runs hotboard."""
    found = []
    for name, service in compose()["services"].items():
        if service.get("image") != "hotboard:local":
            continue
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        entrypoint = " ".join(service.get("entrypoint") or [])
        env |= {var: "" for var in re.findall(r"\b(HOTBOARD_\w+)=", entrypoint)}  # read from a secret file
        found.append(pytest.param(name, service["command"][0], env, id=name))
    return found


@pytest.mark.parametrize(("service", "command", "env"), compose_services())
def test_compose_environment_is_settings_of_each_service_command(
    service: str, command: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert command in COMMANDS, f"{COMPOSE.name}: {service} runs {command!r}: add its settings to COMMANDS"
    secrets = {k for k, v in env.items() if v == ""}
    check(command, {k: v for k, v in env.items() if k not in secrets}, monkeypatch)
    check(command, dict.fromkeys(secrets, "x"), monkeypatch)  # names only: the values are secret files


def test_every_hotboard_service_of_compose_is_checked() -> None:
    assert {p.values[1] for p in compose_services()} == {"worker", "archiver", "audit", "api", "produce"}


def k8s_containers() -> list[Any]:
    """(workload/container, command, its environment: the ConfigMap it loads, then its own ``env``)."""
    found = []
    for doc in manifests():
        pod: dict[str, Any] = doc.get("spec", {}).get("template", {}).get("spec", {})
        if doc.get("kind") == "CronJob":
            pod = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        for container in pod.get("containers", []):
            if container.get("args", [""])[0] not in COMMANDS:
                continue
            maps = [ref["configMapRef"]["name"] for ref in container.get("envFrom", []) if "configMapRef" in ref]
            env = {k: v for name in maps for k, v in config_map(name).items()}
            env |= {e["name"]: str(e.get("value", "x")) for e in container.get("env", [])}  # x: from a Secret
            where = f"{doc['metadata']['name']}/{container['name']}"
            found.append(pytest.param(where, container["args"][0], env, maps, id=where))
    return found


def config_map(name: str) -> dict[str, str]:
    [data] = [doc["data"] for doc in manifests() if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == name]
    return {k: str(v) for k, v in data.items()}


def loaded_by(config: str) -> set[str]:
    return {p.values[1] for p in k8s_containers() if config in p.values[3]}


@pytest.mark.parametrize(("container", "command", "env", "maps"), k8s_containers())
def test_k8s_environment_is_settings_of_each_container_command(
    container: str, command: str, env: dict[str, str], maps: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ConfigMap shared by several commands may hold settings of any of them (each ignores the others')."""
    shared = {n for config in maps for cmd in loaded_by(config) for n in names(*COMMANDS[cmd])}
    own = {n for n in env if not any(n in config_map(config) for config in maps)}
    check(command, {n: env[n] for n in own}, monkeypatch)
    check(command, env, monkeypatch, known=shared | names(*COMMANDS[command]))


def test_k8s_hotboard_workloads_are_all_checked() -> None:
    assert {p.values[1] for p in k8s_containers()} == {"worker", "archiver", "audit", "api"}
    assert loaded_by("hotboard-config") == {"worker", "archiver", "audit", "api"}
