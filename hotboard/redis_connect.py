"""How every process reaches Redis: the URL and the settings beside it (ACL user, password or password file,
TLS CA, client certificate and key) turned into redis-py's keyword arguments in one place, for the worker, the
read API and ``hotboard boards`` alike.

Secrets come from files as well as from the URL, so a Kubernetes Secret can be mounted instead of written into
an environment a ConfigMap shows. Every refusal here is one line that names the setting, never its value.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.connection import parse_url

from hotboard import redis_client, redis_url
from hotboard.redis_client import Client
from hotboard.redis_url import BadRedisUrl


class RedisConfigError(BadRedisUrl):
    """Settings that cannot make a connection; the message is one line without any secret."""


class RedisSettings(BaseSettings):
    """The connection settings every process kind shares (``HOTBOARD_REDIS*``)."""

    model_config = SettingsConfigDict(env_prefix="HOTBOARD_", frozen=True, extra="ignore")

    redis: str = Field("redis://127.0.0.1:6379/0", description="Redis URL (rediss:// for TLS)")
    redis_cluster: bool = Field(
        False, description="Redis is a Redis Cluster: --redis names seed nodes, redis://h1:p1[,h2:p2...]"
    )
    redis_username: str = Field("", description="Redis ACL user; empty: the URL's user, else 'default'")
    redis_password: SecretStr = Field(
        SecretStr(""), description="Redis password; prefer HOTBOARD_REDIS_PASSWORD_FILE or the environment"
    )
    redis_password_file: str = Field("", description="File holding the Redis password (a mounted Secret)")
    redis_tls_ca_file: str = Field("", description="CA bundle that signed the Redis server's certificate (rediss://)")
    redis_tls_cert_file: str = Field("", description="Client certificate for Redis's tls-auth-clients (rediss://)")
    redis_tls_key_file: str = Field("", description="Private key of the client certificate (rediss://)")
    redis_tls_verify: Literal["full", "chain"] = Field(
        "full", description="full: the certificate chain and the host name; chain: the chain only"
    )


#: Setting -> redis-py's SSL keyword, in the order a message names them.
_TLS_FILES = {
    "redis_tls_ca_file": "ssl_ca_certs",
    "redis_tls_cert_file": "ssl_certfile",
    "redis_tls_key_file": "ssl_keyfile",
}


def _env(name: str) -> str:
    return f"HOTBOARD_{name.upper()}"


def _password(settings: RedisSettings, url_has_one: bool) -> str | None:
    given = settings.redis_password.get_secret_value()
    if given and settings.redis_password_file:
        raise RedisConfigError("HOTBOARD_REDIS_PASSWORD and HOTBOARD_REDIS_PASSWORD_FILE are both set: keep one")
    if settings.redis_password_file:
        path = settings.redis_password_file
        try:
            with open(path, encoding="utf-8") as f:
                given = f.read().rstrip("\r\n")  # `echo pw > file` and editors add a newline the password lacks
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise RedisConfigError(f"cannot read HOTBOARD_REDIS_PASSWORD_FILE {path!r}: {why}") from None
        if not given:
            raise RedisConfigError(f"HOTBOARD_REDIS_PASSWORD_FILE {path!r} is empty")
    if given and url_has_one:
        raise RedisConfigError("the Redis password is given both in the URL and in the settings: keep one")
    return given or None


def connection_kwargs(settings: RedisSettings) -> dict[str, Any]:
    """Keyword arguments to pass beside ``settings.redis`` to ``Redis.from_url`` or ``ConnectionPool.from_url``
    (the URL's own user, password and ``?ssl_*`` options still apply: redis-py lets the URL win)."""
    redis_url.check(settings.redis, settings.redis_cluster)
    first = redis_client.split_seeds(settings.redis)[0] if settings.redis_cluster else settings.redis
    url = parse_url(first)  # type: ignore[no-untyped-call]
    kwargs: dict[str, Any] = {}
    if settings.redis_username:
        if url.get("username"):
            raise RedisConfigError("the Redis user is given both in the URL and in HOTBOARD_REDIS_USERNAME: keep one")
        kwargs["username"] = settings.redis_username
    if (password := _password(settings, bool(url.get("password")))) is not None:
        kwargs["password"] = password
    files = {name: getattr(settings, name) for name in _TLS_FILES if getattr(settings, name)}
    tls = settings.redis.lower().startswith("rediss://")
    if files and not tls:
        raise RedisConfigError(f"{_env(next(iter(files)))} needs a rediss:// URL (TLS); HOTBOARD_REDIS is not one")
    if ("redis_tls_cert_file" in files) != ("redis_tls_key_file" in files):
        raise RedisConfigError("HOTBOARD_REDIS_TLS_CERT_FILE and HOTBOARD_REDIS_TLS_KEY_FILE go together")
    for name, path in files.items():
        if not os.access(path, os.R_OK):
            raise RedisConfigError(f"cannot read {_env(name)} {path!r}")
        kwargs[_TLS_FILES[name]] = path
    if tls:
        kwargs["ssl_check_hostname"] = settings.redis_tls_verify == "full"
    return kwargs


def check(settings: RedisSettings) -> None:
    """Raise :class:`BadRedisUrl` (a :class:`RedisConfigError` for the settings beside the URL) before any
    client exists."""
    connection_kwargs(settings)


def connect(settings: RedisSettings, **options: Any) -> Client:
    """The client of ``settings``: one server, or a Redis Cluster through its seed nodes (``redis_cluster``).
    ``options`` are the caller's own connection options (timeouts, retry policy)."""
    return redis_client.connect(
        settings.redis, cluster=settings.redis_cluster, **connection_kwargs(settings), **options
    )
