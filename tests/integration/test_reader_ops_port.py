"""The API's ``/metrics`` lives on its own port (``api_metrics_port``), never on the client-facing one: counts
per route, cache hit rates and latencies are for the scraper the NetworkPolicy lets in, not for clients."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from cli.devstack import LOOPBACK
from hotboard import keys
from tests.integration.reader_harness import api_server

pytestmark = pytest.mark.integration

SAMPLE = 'hotboard_api_requests_total{method="GET",route="/v1/boards/{board}/players/{player}",status="200"} 1.0'


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=5) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_metrics_answer_on_the_ops_port_only(redis_url: str, tmp_path: Path) -> None:
    redis.Redis.from_url(redis_url).zadd(keys.board_key("g"), {"a": 1})
    with api_server(redis_url, tmp_path, env={"HOTBOARD_API_HEAD_TIMEOUT_S": "1"}) as server:
        assert _get(server.port, "/v1/boards/g/players/a")[0] == 200
        status, body = _get(server.port, "/metrics")
        assert status == 404 and "hotboard_api" not in body
        assert _get(server.port, "/metrics?x=1")[0] == 404
        status, body = _get(server.metrics_port, "/metrics")
        assert status == 200 and SAMPLE in body
        assert 'route="/metrics"' not in body  # the scrape is no client request
        assert _get(server.metrics_port, "/v1/boards/g/players/a")[0] == 404  # no reads on the ops port
        assert _raw(server.metrics_port, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        # Nothing, garbage, or a head past the cap: closed quietly, and the next scrape is still answered.
        with socket.create_connection((LOOPBACK, server.metrics_port), timeout=5) as idle:
            started = time.monotonic()
            assert idle.recv(1) == b""  # closed by the server after the head timeout
            assert time.monotonic() - started < 4
        assert _raw(server.metrics_port, b"x" * 10_000) == b""
        assert _raw(server.metrics_port, b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        assert _get(server.metrics_port, "/metrics")[0] == 200


def test_metrics_port_zero_turns_it_off(redis_url: str, tmp_path: Path) -> None:
    with api_server(redis_url, tmp_path, "--api-metrics-port", "0") as server:
        assert _get(server.port, "/metrics")[0] == 404
        with pytest.raises(OSError):
            socket.create_connection((LOOPBACK, server.metrics_port), timeout=2).close()
