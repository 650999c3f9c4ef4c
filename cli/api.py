"""``hotboard api``: serve the read API with uvicorn (uvloop event loop, httptools parser with the bounds of
:mod:`reader_api.server`)."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

from cli.exits import EXIT_CONFIG
from cli.options import add_options, settings_from
from cli.process import bind_error
from hotboard import logs, redis_connect
from hotboard.settings import LogSettings
from reader_api.app import create_app
from reader_api.server import Limits, protocol_class
from reader_api.settings import ApiSettings

#: Short spellings of the most used options (the generated ``--api-host`` etc. work too).
ALIASES = {
    "api_host": ["--host"],
    "api_port": ["--port"],
    "api_cache_size": ["--cache-size"],
    "api_read_from": ["--read-from"],
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("api", help="HTTP JSON read API over the Redis boards")
    add_options(p, ApiSettings, aliases=ALIASES)
    p.set_defaults(run=cmd_api)


def uvicorn_options(settings: ApiSettings) -> dict[str, Any]:
    """The server setup: ``api_http=httptools`` reproduces the stock setup the benchmark compares against."""
    common: dict[str, Any] = {
        "host": settings.api_host,
        "port": settings.api_port,
        "loop": "uvloop",
        "access_log": False,
        "log_level": settings.api_log_level,
        "server_header": False,
    }
    if settings.api_http == "httptools":
        return {**common, "http": "httptools"}
    # No proxy is assumed in front, so no X-Forwarded-* header is trusted (uvicorn trusts them from loopback).
    bounds: dict[str, Any] = {
        "limit_concurrency": settings.api_max_connections + 1,  # uvicorn counts the new one
        "timeout_keep_alive": settings.api_keep_alive_s,
        "proxy_headers": False,
    }
    if settings.api_http == "h11":
        head = settings.api_max_request_line_bytes + settings.api_max_header_bytes
        return {**common, **bounds, "http": "h11", "h11_max_incomplete_event_size": head}
    limits = Limits(
        max_request_line_bytes=settings.api_max_request_line_bytes,
        max_header_bytes=settings.api_max_header_bytes,
        max_headers=settings.api_max_headers,
        head_timeout_s=settings.api_head_timeout_s,
        retry_after_s=settings.api_retry_after_s,
    )
    return {**common, **bounds, "http": protocol_class(limits)}


def cmd_api(args: argparse.Namespace) -> int:
    settings = settings_from(ApiSettings, args)
    redis_connect.check(settings)  # cli.main prints its one line, not a traceback from inside uvicorn
    ports = [("--api-port", settings.api_host, settings.api_port)]
    if settings.api_metrics_port:
        ports.append(("--api-metrics-port", settings.api_metrics_host, settings.api_metrics_port))
    for name, host, port in ports:
        if (why := bind_error(host, port)) is not None:
            message = f"port {port} on {host} is not available ({why}); pick another with {name}"
            return logs.command_failed("api", message, exit_code=EXIT_CONFIG)
    options = uvicorn_options(settings)
    if settings_from(LogSettings, args).log_format == "json":
        options["log_config"] = None  # uvicorn's loggers then reach the root handler (hotboard.logs)
    uvicorn.run(create_app(settings, serve_metrics=True), **options)
    return 0
