"""The worker's ops endpoint serves metrics and the two Kubernetes probes."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from cli.devstack import free_port
from ingest.ops_http import serve_ops


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.parametrize(("ready", "alive"), [(True, True), (False, True), (False, False)])
def test_probes_and_metrics(ready: bool, alive: bool) -> None:
    registry = CollectorRegistry()
    Counter("hotboard_probe_test", "a test counter", registry=registry).inc(3)
    port = free_port()
    server = serve_ops("127.0.0.1", port, registry, lambda: ready, lambda: alive)
    try:
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/healthz")[0] == (200 if alive else 503)
        status, body = _get(f"{base}/readyz")
        assert status == (200 if ready else 503)
        status, body = _get(f"{base}/metrics")
        assert status == 200 and "hotboard_probe_test_total 3.0" in body
    finally:
        server.shutdown()
        server.server_close()


def test_idle_connections_neither_block_probes_nor_stay_open() -> None:
    """One idle TCP connection blocks none of /healthz, /readyz and /metrics (as serving one connection at a time
    would)."""
    import socket
    import time

    port = free_port()
    server = serve_ops("127.0.0.1", port, CollectorRegistry(), lambda: True, lambda: True, timeout_s=1.0)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        idle[1].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # trickling: headers never end
        started = time.monotonic()
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert time.monotonic() - started < 1.0, "a probe waited behind an idle connection"
        for conn in idle:
            conn.settimeout(5)
            assert conn.recv(1024) in (b"", b"HTTP/1.0 408 Request Timeout\r\n"), "idle connection not closed"
    finally:
        for conn in idle:
            conn.close()
        server.shutdown()
        server.server_close()


def test_idle_and_aborted_connections_leave_no_traceback(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each idle connection timed out in the handler thread and printed a ~1 KiB traceback to stderr: one
    client opening connections in a loop filled the log. Now they close quietly, and the port still answers."""
    import socket
    import struct

    port = free_port()
    server = serve_ops("127.0.0.1", port, CollectorRegistry(), lambda: True, lambda: True, timeout_s=0.3)
    try:
        for _ in range(3):  # aborted: half a head, then a reset instead of a close
            with socket.create_connection(("127.0.0.1", port)) as aborted:
                aborted.sendall(b"GET /healthz HTTP/1.1\r\nHost")
                aborted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        idle[0].sendall(b"GET /healthz HTTP/1.1\r\n")  # a head that never ends
        for conn in idle:  # the handler has finished with a connection once the server closed it
            conn.settimeout(5)
            assert conn.recv(1024) in (b"", b"HTTP/1.0 408 Request Timeout\r\n")
            conn.close()
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
    assert [r for r in caplog.records if r.exc_info or r.levelno >= 40] == []
    assert capfd.readouterr().err == "", "the ops server wrote to stderr"
