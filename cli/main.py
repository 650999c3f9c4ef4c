"""``hotboard``: the command line of every process kind (worker, api, boards) and of the dev tooling (dev,
produce, demo). One parser; each subcommand names its ``run``; errors every command shares end here as one line
and an exit code (:mod:`cli.exits`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from cli import api, archiver, audit, boards, dlq, produce, rebuild, restore, send, stack, worker
from cli.devstack import StackError
from cli.exits import EXIT_CONFIG
from cli.options import add_options, settings_from
from hotboard import __version__, logs, redis_url
from hotboard.settings import LogSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hotboard",
        description="Real-time leaderboards: workers fold score events from Kafka into Redis sorted sets, "
        "exactly once; a read API answers rank, top-N, around-me and friends queries.",
        epilog="Start here: ./dev demo runs everything on loopback (then try hotboard send and hotboard dlq "
        "against it); ./dev test runs the test suite. Each command has --help. Documentation: README.md and "
        "docs/ (configuration.md lists every setting).",
    )
    parser.add_argument("--version", action="version", version=f"hotboard {__version__}")
    add_options(parser, LogSettings)
    sub = parser.add_subparsers(dest="command", required=True)
    worker.add_parser(sub)
    archiver.add_parser(sub)
    restore.add_parser(sub)
    rebuild.add_parser(sub)
    audit.add_parser(sub)
    api.add_parser(sub)
    boards.add_parser(sub)
    stack.add_dev_parser(sub)
    send.add_parser(sub)
    dlq.add_parser(sub)
    produce.add_parser(sub)
    stack.add_demo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        logs.setup_logging(settings_from(LogSettings, args))
        return int(args.run(args))
    except StackError as exc:
        print(f"hotboard {args.command}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ValidationError as exc:
        print(f"hotboard {args.command}: invalid settings:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except redis_url.BadRedisUrl as exc:  # before any client: one line, the password masked
        print(f"hotboard {args.command}: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
