"""The worker's ops endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for Kubernetes.

prometheus-client's WSGI app does the metrics; this only adds the two probes in front of it, on a
daemon thread so a busy event loop never makes a probe time out.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


log = logging.getLogger(__name__)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes every second would flood the log
        pass

    def handle(self) -> None:
        """A client that idles past the socket timeout or resets mid-request is simply dropped: socketserver
        would print a ~1 KiB traceback per connection, so one client in a loop could fill the log."""
        try:
            super().handle()
        except (TimeoutError, ConnectionError):
            self.close_connection = True


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per connection, so one slow or idle client never blocks the probes or a scrape."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Anything else a connection raises: one line, not socketserver's traceback on stderr."""
        error = sys.exception()
        log.warning("ops connection from %s failed: %s: %s", client_address, type(error).__name__, error)


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
    host: str,
    port: int,
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    alive: Callable[[], bool],
    timeout_s: float = 5.0,
) -> WSGIServer:
    """Start serving on a daemon thread; call ``shutdown()`` then ``server_close()`` to stop."""
    app = ops_app(registry, ready, alive)
    # The handler's socket timeout: an idle or trickling client is cut off instead of holding a thread.
    handler = type("_Handler", (_QuietHandler,), {"timeout": timeout_s})
    server = make_server(host, port, app, _ThreadingWSGIServer, handler_class=handler)
    threading.Thread(target=server.serve_forever, name="hotboard-ops-http", daemon=True).start()
    return server
