"""Log output of every command: text lines for a terminal, or one JSON object per line (``--log-format json``)
for a log pipeline, each with its time, level, logger, message, the ``extra`` fields of the call and, when
there is one, the exception's traceback as text."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import orjson

from hotboard.settings import LogSettings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: Attributes every record has: anything else on a record came from ``extra=``. uvicorn adds ``color_message``,
#: the message with terminal colour codes.
_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a field that JSON cannot hold is written as its ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _RECORD_FIELDS and name not in entry:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


#: Set by :func:`setup_logging`: whether a command's one-line failure (:func:`command_failed`) is JSON too.
_json_failures = False


def command_failed(
    command: str, message: str, *, exit_code: int, prefix: bool = True, level: int = logging.ERROR, **fields: Any
) -> int:
    """A command's one-line failure on stderr, and ``exit_code`` back. As text, the line a person reads,
    ``hotboard COMMAND: MESSAGE`` (just ``MESSAGE`` without ``prefix``); with ``--log-format json``, one JSON
    object like every log line: ``level`` (ERROR), logger ``hotboard.COMMAND``, the message, ``command``,
    ``exit_code`` and ``fields``."""
    if _json_failures:
        record = logging.makeLogRecord(
            {
                "name": "hotboard." + command.replace(" ", "."),
                "levelno": level,
                "levelname": logging.getLevelName(level),
            }
        )
        record.__dict__.update(fields, command=command, exit_code=exit_code)
        record.msg = message  # after the fields: none of them may replace the message
        line = JsonFormatter().format(record)
    else:
        line = f"hotboard {command}: {message}" if prefix else message
    sys.stderr.write(line + "\n")
    return exit_code


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("hotboard").critical("uncaught %s", kind.__name__, exc_info=(kind, exc, tb))


def setup_logging(settings: LogSettings) -> None:
    """The root handler on stderr. With JSON, warnings and an uncaught exception become records too, so
    stderr holds nothing but JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    global _json_failures
    json_lines = _json_failures = settings.log_format == "json"
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, settings.log_level.upper(), logging.INFO), handlers=[handler])
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    if json_lines:
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
