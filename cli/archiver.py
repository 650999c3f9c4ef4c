"""``hotboard archiver``: apply every window of the topic to the PostgreSQL archive until SIGTERM drains it."""

from __future__ import annotations

import argparse
from typing import Any

from archive.archiver import Archiver
from archive.settings import ArchiverSettings
from cli.options import add_options, settings_from
from cli.worker import run_member
from hotboard import redis_connect


def add_parser(sub: Any) -> None:
    p = sub.add_parser("archiver", help="keep the PostgreSQL archive (its own consumer group, 5 s windows)")
    add_options(p, ArchiverSettings)
    p.set_defaults(run=cmd_archiver)


def cmd_archiver(args: argparse.Namespace) -> int:
    settings = settings_from(ArchiverSettings, args)
    redis_connect.check(settings)
    return run_member("archiver", lambda: Archiver(settings))
