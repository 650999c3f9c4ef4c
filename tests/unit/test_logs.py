"""JSON log lines: every record is one line that parses, with level, logger, message, the call's ``extra``
fields and the exception's traceback; with JSON on, warnings and an uncaught exception are records too."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cli.main import build_parser
from cli.options import settings_from
from hotboard.logs import JsonFormatter
from hotboard.settings import LogSettings
from ingest.settings import WorkerSettings


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("hotboard.test-json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield logger, out
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_each_record_is_one_json_line_with_level_logger_message_and_fields(
    json_log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = json_log
    logger.warning("flush failed for %d boards\nsecond line", 3, extra={"partition": 5, "board": "global"})
    logger.error("odd field", extra={"where": Path("/tmp/x"), "ids": set})
    try:
        1 / 0  # noqa: B018 - the exception is the point
    except ZeroDivisionError:
        logger.exception("window lost")
    assert len(out.getvalue().splitlines()) == 3
    first, second, third = _lines(out)
    assert first["level"] == "WARNING" and first["logger"] == "hotboard.test-json"
    assert first["message"] == "flush failed for 3 boards\nsecond line"
    assert (first["partition"], first["board"]) == (5, "global")
    assert first["ts"].endswith("+00:00")
    assert "args" not in first and "msg" not in first and "exception" not in first
    assert second["where"] == "/tmp/x" and second["ids"] == "<class 'set'>"
    assert third["level"] == "ERROR" and third["message"] == "window lost"
    assert "ZeroDivisionError: division by zero" in third["exception"] and "Traceback" in third["exception"]


def test_json_on_the_command_line_or_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    assert settings_from(LogSettings, parser.parse_args(["produce"])).log_format == "text"
    assert settings_from(LogSettings, parser.parse_args(["--log-format", "json", "produce"])).log_format == "json"
    assert settings_from(WorkerSettings, parser.parse_args(["worker", "--log-format", "json"])).log_format == "json"
    monkeypatch.setenv("HOTBOARD_LOG_FORMAT", "json")
    assert settings_from(LogSettings, parser.parse_args(["boards", "list"])).log_format == "json"


def test_with_json_on_stderr_holds_only_json_lines_even_for_warnings_and_a_crash() -> None:
    script = (
        "import logging, warnings\n"
        "from hotboard.logs import setup_logging\n"
        "from hotboard.settings import LogSettings\n"
        "setup_logging(LogSettings(log_format='json'))\n"
        "logging.getLogger('hotboard.worker').info('started', extra={'partitions': [0, 1]})\n"
        "warnings.warn('deprecated thing', DeprecationWarning, stacklevel=1)\n"
        "raise RuntimeError('boom')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = [orjson.loads(line) for line in proc.stderr.splitlines()]
    assert [(e["level"], e["logger"]) for e in lines] == [
        ("INFO", "hotboard.worker"),
        ("WARNING", "py.warnings"),
        ("CRITICAL", "hotboard"),
    ]
    assert lines[0]["partitions"] == [0, 1]
    assert "deprecated thing" in lines[1]["message"]
    assert "RuntimeError: boom" in lines[2]["exception"]
