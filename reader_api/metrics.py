"""Prometheus metrics of the API, on a registry of its own (one per app, so tests and several apps in one
process never collide). Metric names and labels are a contract with the dashboard.

Labels stay bounded: ``route`` is the route template (never a raw path, so no board or player names),
``method`` is one of the standard verbs or ``other``, ``status`` is the numeric code.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "hotboard_api_requests", "HTTP requests answered", ["route", "method", "status"], registry=self.registry
        )
        self.seconds = Histogram(
            "hotboard_api_request_seconds",
            "Time to answer a request",
            ["route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.cache = Counter("hotboard_api_cache", "Top-page cache lookups", ["result"], registry=self.registry)
        self.cache_hit = self.cache.labels(result="hit")
        self.cache_miss = self.cache.labels(result="miss")

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method if method in METHODS else "other", str(status)).inc()
        self.seconds.labels(route).observe(seconds)


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware: that costs a task and a stream per request)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self.metrics.observe(route_template(scope), scope["method"], status, time.perf_counter() - started)
