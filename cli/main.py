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
from cli.options import add_options, option, settings_from
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
    except ValidationError as exc:
        return logs.command_failed(args.command, f"invalid settings: {settings_errors(exc)}", exit_code=EXIT_CONFIG)
    except (StackError, redis_url.BadRedisUrl) as exc:  # a bad URL before any client: the password masked
        return logs.command_failed(args.command, str(exc), exit_code=EXIT_CONFIG)


def settings_errors(exc: ValidationError) -> str:
    """Pydantic's report in one line: each setting named (its option and variable) with the reason, without
    the input (it may be a secret) or the link to pydantic's documentation."""
    said = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        reason = error["msg"].removeprefix("Value error, ")
        loc = ".".join(str(part) for part in error["loc"])
        name = str(error["loc"][0]) if error["loc"] else ""
        said.append(f"{loc} ({option(name)}, HOTBOARD_{name.upper()}): {reason}" if name else reason)
    return "; ".join(said)


if __name__ == "__main__":
    sys.exit(main())
