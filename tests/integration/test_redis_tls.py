"""Redis over TLS with client certificates and ACL users, end to end: a redis-server with ``--tls-port`` and
``--tls-auth-clients yes`` (certificates made here with ``openssl``), the plain port off and the default user
disabled; a worker writing through the embedded broker as its ACL user, the read API and ``hotboard boards``
reading as theirs. Totals equal the reference, and no password shows in a log line or an error."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from cli.process import LOOPBACK, Child, free_port, port_open
from hotboard import keys
from hotboard.redis_connect import RedisSettings, connection_kwargs
from ingest.worker import Worker
from tests.integration.harness import Feeder, run_worker, sample, totals_of, worker_events, worker_settings
from tests.integration.reader_harness import api_server

pytestmark = pytest.mark.integration

WRITER_PASSWORD = f"Wr1ter-{secrets.token_hex(8)}"
READER_PASSWORD = f"Re4der-{secrets.token_hex(8)}"
WRONG_PASSWORD = f"Wr0ng-{secrets.token_hex(8)}"


@dataclass(frozen=True)
class TlsRedis:
    port: int
    ca: Path
    cert: Path  # the client certificate tls-auth-clients asks for
    key: Path
    dir: Path

    @property
    def url(self) -> str:
        return f"rediss://{LOOPBACK}:{self.port}/0"

    def settings(self, **kw: str) -> dict[str, str]:
        return {
            "redis_tls_ca_file": str(self.ca),
            "redis_tls_cert_file": str(self.cert),
            "redis_tls_key_file": str(self.key),
            **kw,
        }

    def env(self, **kw: str) -> dict[str, str]:
        return {f"HOTBOARD_{k.upper()}": v for k, v in self.settings(**kw).items()}


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _certificates(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by that CA."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", d / "ca.key", "-out", d / "ca.crt", "-days", "2", "-subj", "/CN=test-ca")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", *ec, "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr", "-subj", f"/CN={name}")
        signed_by_ca = ("-CA", d / "ca.crt", "-CAkey", d / "ca.key", "-CAcreateserial")
        request, extensions = ("-in", d / f"{name}.csr"), ("-extfile", d / f"{name}.ext")
        _openssl("x509", "-req", *request, *signed_by_ca, *extensions, "-out", d / f"{name}.crt", "-days", "2")


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[TlsRedis]:
    d = tmp_path / "tls"
    d.mkdir()
    _certificates(d)
    port = free_port()
    # the plain port off, TLS with client certificates, the ACL users: a few options per line
    options = [
        ("--port", "0", "--tls-port", str(port), "--bind", LOOPBACK),
        ("--save", "", "--appendonly", "no", "--dir", str(d)),
        ("--tls-cert-file", str(d / "server.crt"), "--tls-key-file", str(d / "server.key")),
        ("--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "yes"),
        ("--user", "writer", "on", f">{WRITER_PASSWORD}", "~hb:*", "+@all"),
        ("--user", "reader", "on", f">{READER_PASSWORD}", "~hb:*", "+@read", "+@scripting", "-@write"),
        ("--user", "default", "off"),
    ]
    command = ["redis-server", *(arg for option in options for arg in option)]
    server = Child("redis-server (TLS)", command, log_path=d / "redis.log", ready=lambda: port_open(port))
    with server.start():
        yield TlsRedis(port, d / "ca.crt", d / "client.crt", d / "client.key", d)


@contextlib.asynccontextmanager
async def client(server: TlsRedis, **kw: str) -> AsyncIterator[Redis]:
    settings = RedisSettings.model_validate({"redis": server.url, **server.settings(**kw)})
    redis = Redis.from_url(settings.redis, **connection_kwargs(settings))
    try:
        yield redis
    finally:
        await redis.aclose()


async def board_totals(server: TlsRedis, board: str) -> dict[str, int]:
    async with client(server, redis_username="writer", redis_password=WRITER_PASSWORD) as redis:
        rows = cast("list[tuple[bytes, float]]", await redis.zrange(keys.board_key(board), 0, -1, withscores=True))
    return {member.decode(): int(score) for member, score in rows}


def test_worker_and_api_over_tls_with_acl_users(
    kafka: str,
    topic_factory: Callable[..., str],
    tls_redis: TlsRedis,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = worker_events("global", players=40, count=3000)
    expected = totals_of(events)["global"]
    topic = topic_factory(4)
    Feeder(kafka, topic, events, rate=0).finish()
    # The writer's user and password in the URL (the common spelling), the TLS files beside it.
    url = f"rediss://writer:{WRITER_PASSWORD}@{LOOPBACK}:{tls_redis.port}/0"
    settings = worker_settings(kafka, url, topic, "tls", **tls_redis.settings())
    caplog.set_level(logging.DEBUG)

    async def run() -> None:
        def flushed(worker: Worker) -> bool:
            applied = sample(worker, "hotboard_events_total", result="applied")
            return applied >= len(events) and not worker.pending_entries

        await run_worker(settings, flushed, "every event applied over TLS")
        assert await board_totals(tls_redis, "global") == expected

    asyncio.run(run())
    assert caplog.records, "the worker logged nothing: the check below would prove nothing"
    assert WRITER_PASSWORD not in caplog.text

    # The API as the read-only user, its password from a file (a mounted Secret), over TLS with its certificate.
    password_file = tmp_path / "reader-password"
    password_file.write_text(READER_PASSWORD + "\n")
    env = tls_redis.env(redis_username="reader", redis_password_file=str(password_file))
    with api_server(tls_redis.url, tmp_path, env=env) as api:
        assert httpx.get(f"{api.url}/readyz", timeout=5).status_code == 200
        top = httpx.get(f"{api.url}/v1/boards/global/top", params={"limit": 100}, timeout=5).json()
        assert {e["player"]: e["score"] for e in top["entries"]} == expected
        assert top["total"] == len(expected)
    assert READER_PASSWORD not in (tmp_path / f"api-{api.port}.log").read_text()


def test_without_the_client_certificate_tls_auth_clients_refuses(tls_redis: TlsRedis) -> None:
    """The server really asks for a client certificate: the same user without one does not get in."""

    async def attempt() -> None:
        settings = RedisSettings(
            redis=tls_redis.url,
            redis_username="writer",
            redis_password=WRITER_PASSWORD,
            redis_tls_ca_file=str(tls_redis.ca),
        )
        redis = Redis.from_url(settings.redis, **connection_kwargs(settings))
        try:
            with pytest.raises(RedisConnectionError) as refused:
                await redis.ping()
            assert WRITER_PASSWORD not in str(refused.value)
        finally:
            await redis.aclose()

    asyncio.run(attempt())


def _boards_list(server: TlsRedis, **kw: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOTBOARD_REDIS": server.url, **server.env(**kw)}
    command = [sys.executable, "-m", "cli.main", "boards", "list"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_a_wrong_password_is_one_line_without_it(tls_redis: TlsRedis) -> None:
    ok = _boards_list(tls_redis, redis_username="reader", redis_password=READER_PASSWORD)
    assert ok.returncode == 0, ok.stderr
    wrong = _boards_list(tls_redis, redis_username="reader", redis_password=WRONG_PASSWORD)
    assert wrong.returncode == 3, wrong.stderr
    assert wrong.stdout == "" and len(wrong.stderr.splitlines()) == 1, wrong.stderr
    assert "password" in wrong.stderr.lower() and "reader" in wrong.stderr, wrong.stderr
    assert WRONG_PASSWORD not in wrong.stderr and WRONG_PASSWORD[:8] not in wrong.stderr
    url_wrong_env = {**os.environ, **tls_redis.env()}
    url_wrong_env["HOTBOARD_REDIS"] = f"rediss://reader:{WRONG_PASSWORD}@{LOOPBACK}:{tls_redis.port}/0"
    url_wrong = subprocess.run(
        [sys.executable, "-m", "cli.main", "boards", "show", "global"],
        env=url_wrong_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert url_wrong.returncode == 3 and len(url_wrong.stderr.splitlines()) == 1, url_wrong.stderr
    assert WRONG_PASSWORD not in url_wrong.stderr
