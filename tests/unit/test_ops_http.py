"""The worker's ops endpoint serves metrics and the two Kubernetes probes."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from hotboard.devstack import free_port
from hotboard.ops_http import serve_ops


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
