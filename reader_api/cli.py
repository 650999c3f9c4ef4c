"""``hotboard api``: serve the read API with uvicorn (uvloop event loop, httptools parser)."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

from hotboard.settings_cli import add_options, settings_from
from reader_api.app import create_app
from reader_api.settings import ApiSettings

#: Short spellings kept from before the options were generated (``--api-host`` etc. work too).
ALIASES = {"api_host": ["--host"], "api_port": ["--port"], "api_cache_size": ["--cache-size"]}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("api", help="HTTP JSON read API over the Redis boards")
    add_options(p, ApiSettings, aliases=ALIASES)
    p.set_defaults(run=cmd_api)


def cmd_api(args: argparse.Namespace) -> int:
    settings = settings_from(ApiSettings, args)
    uvicorn.run(
        create_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level=settings.api_log_level,
        server_header=False,
    )
    return 0
