"""``hotboard api``: serve the read API with uvicorn (uvloop event loop, httptools parser with the bounds of
:mod:`reader_api.server`)."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

from reader_api.app import create_app
from reader_api.server import Limits, protocol_class
from reader_api.settings import ApiSettings


def add_parser(sub: Any) -> None:
    p = sub.add_parser("api", help="HTTP JSON read API over the Redis boards")
    p.add_argument("--redis", help="Redis URL (HOTBOARD_REDIS, default redis://127.0.0.1:6379/0)")
    p.add_argument("--host", dest="api_host", help="interface to bind (HOTBOARD_API_HOST, default 127.0.0.1)")
    p.add_argument("--port", dest="api_port", type=int, help="port (HOTBOARD_API_PORT, default 8000)")
    p.add_argument("--cache-size", dest="api_cache_size", type=int,
                   help="cached top pages, 0 = off (HOTBOARD_API_CACHE_SIZE, default 1024)")  # fmt: skip
    p.set_defaults(run=cmd_api)


def settings_from(args: argparse.Namespace) -> ApiSettings:
    names = ("redis", "api_host", "api_port", "api_cache_size")
    given = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    return ApiSettings(**given)


def uvicorn_options(settings: ApiSettings) -> dict[str, Any]:
    """The server setup: ``api_http=httptools`` reproduces the stock setup the benchmark compares against."""
    common: dict[str, Any] = {
        "host": settings.api_host, "port": settings.api_port, "loop": "uvloop", "access_log": False,
        "log_level": settings.api_log_level, "server_header": False,
    }  # fmt: skip
    if settings.api_http == "httptools":
        return {**common, "http": "httptools"}
    # No proxy is assumed in front, so no X-Forwarded-* header is trusted (uvicorn trusts them from loopback).
    bounds: dict[str, Any] = {"limit_concurrency": settings.api_max_connections + 1,  # uvicorn counts the new one
                              "timeout_keep_alive": settings.api_keep_alive_s, "proxy_headers": False}  # fmt: skip
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
    settings = settings_from(args)
    uvicorn.run(create_app(settings), **uvicorn_options(settings))
    return 0
