"""The worker's ops endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for Kubernetes.

prometheus-client's WSGI app does the metrics; this only adds the two probes in front of it, on a
daemon thread so a busy event loop never makes a probe time out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes every second would flood the log
        pass


class _ThreadingWSGIServer(WSGIServer):
    daemon_threads = True


def ops_app(registry: CollectorRegistry, ready: Callable[[], bool], alive: Callable[[], bool]) -> WSGIApp:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            if alive():
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ok\n"]
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"stuck: the flush loop has not ticked recently\n"]
        if path == "/readyz":
            if ready():
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ready: partitions assigned and positioned\n"]
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"not ready: no partition assigned and positioned yet\n"]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    return app


def serve_ops(
    host: str, port: int, registry: CollectorRegistry, ready: Callable[[], bool], alive: Callable[[], bool]
) -> WSGIServer:
    """Start serving on a daemon thread; call ``shutdown()`` then ``server_close()`` to stop."""
    app = ops_app(registry, ready, alive)
    server = make_server(host, port, app, _ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="hotboard-ops-http", daemon=True).start()
    return server
