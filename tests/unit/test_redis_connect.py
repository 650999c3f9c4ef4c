"""One place turns the Redis settings into redis-py's connection arguments; every refusal is one line that
names the setting and never holds a secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import RedisCluster

from hotboard.redis_connect import RedisConfigError, RedisSettings, connect, connection_kwargs

SECRET = "Zq8xK2pW9vT4"


def files(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name in ("ca", "crt", "key", "pw"):
        path = tmp_path / name
        path.write_text(f"{SECRET}\n" if name == "pw" else "x")
        paths[name] = str(path)
    return paths


def test_plain_url_adds_nothing() -> None:
    assert connection_kwargs(RedisSettings(redis="redis://127.0.0.1:6379/0")) == {}


def test_tls_files_user_and_password_file(tmp_path: Path) -> None:
    f = files(tmp_path)
    settings = RedisSettings(
        redis="rediss://redis.example:6380/0",
        redis_username="writer",
        redis_password_file=f["pw"],
        redis_tls_ca_file=f["ca"],
        redis_tls_cert_file=f["crt"],
        redis_tls_key_file=f["key"],
    )
    assert connection_kwargs(settings) == {
        "username": "writer",
        "password": SECRET,  # the file's trailing newline is not part of it
        "ssl_ca_certs": f["ca"],
        "ssl_certfile": f["crt"],
        "ssl_keyfile": f["key"],
        "ssl_check_hostname": True,
    }
    chain_only = RedisSettings(redis="rediss://10.0.0.1:6380/0", redis_tls_verify="chain")
    assert connection_kwargs(chain_only) == {"ssl_check_hostname": False}
    assert connection_kwargs(RedisSettings(redis_password=SECRET)) == {"password": SECRET}


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"redis_tls_ca_file": "ca"}, "HOTBOARD_REDIS_TLS_CA_FILE needs a rediss:// URL"),
        ({"redis": "rediss://h:1/0", "redis_tls_cert_file": "crt"}, "go together"),
        ({"redis": "rediss://h:1/0", "redis_tls_ca_file": "/nonexistent/ca"}, "cannot read HOTBOARD_REDIS_TLS_CA_FILE"),
        ({"redis_password_file": "/nonexistent/pw"}, "cannot read HOTBOARD_REDIS_PASSWORD_FILE '/nonexistent/pw'"),
        ({"redis_password_file": "empty"}, "is empty"),
        ({"redis_password_file": "pw", "redis_password": SECRET}, "both set"),
        ({"redis": f"redis://u:{SECRET}@h:1/0", "redis_password": SECRET}, "both in the URL and in the settings"),
        ({"redis": f"redis://u:{SECRET}@h:1/0", "redis_password_file": "pw"}, "both in the URL and in the settings"),
        ({"redis": "redis://u@h:1/0", "redis_username": "v"}, "HOTBOARD_REDIS_USERNAME"),
        ({"redis": f"redis://u:{SECRET[:6]}/{SECRET[6:]}@h:1/0"}, "invalid --redis"),
    ],
)
def test_refusals_are_one_line_without_the_secret(given: dict[str, Any], says: str, tmp_path: Path) -> None:
    f = files(tmp_path)
    (tmp_path / "empty").write_text("\n")
    resolved = {k: f.get(v, str(tmp_path / v) if v == "empty" else v) for k, v in given.items()}
    with pytest.raises(RedisConfigError if "invalid" not in says else ValueError) as refused:
        connection_kwargs(RedisSettings.model_validate(resolved))
    message = str(refused.value)
    assert says in message and "\n" not in message
    assert SECRET not in message and SECRET[:6] not in message and SECRET[6:] not in message


def test_settings_never_show_the_password() -> None:
    settings = RedisSettings(redis_password=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings.model_dump())


def test_a_cluster_seed_list_takes_the_same_connection_settings(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text(f"{SECRET}\n")
    settings = RedisSettings(
        redis="redis://h1:7000,h2:7001", redis_cluster=True, redis_username="w", redis_password_file=str(password)
    )
    assert connection_kwargs(settings) == {"username": "w", "password": SECRET}
    client = connect(settings)
    assert isinstance(client, RedisCluster)
    assert [(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()] == [("h1", 7000), ("h2", 7001)]


def test_a_seed_list_without_the_cluster_switch_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid --redis"):
        connection_kwargs(RedisSettings(redis="redis://h1:7000,h2:7001"))
