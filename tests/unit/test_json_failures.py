"""A command's one-line failure with ``--log-format json`` (or ``HOTBOARD_LOG_FORMAT=json``) is one JSON
object like every log line (docs/configuration.md: stderr holds one JSON object per line), with its exit
code; as text it is the line a person reads, and pydantic's report is one line naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from cli.devstack import free_port
from cli.exits import EXIT_CONFIG, EXIT_UNAVAILABLE

DEAD = f"127.0.0.1:{free_port()}"  # nothing listens there
FAILURES = [
    pytest.param(["worker", "--redis", "redis://:p@ss@[bad"], EXIT_CONFIG, "worker", "invalid --redis", id="worker"),
    pytest.param(["api", "--redis", "redis://:p@ss@[bad"], EXIT_CONFIG, "api", "invalid --redis", id="api"),
    pytest.param(
        ["produce", "--kafka", DEAD, "--kafka-start-timeout-s", "1", "--count", "1"],
        EXIT_UNAVAILABLE,
        "produce",
        f"Kafka at {DEAD}",
        id="produce-kafka-down",
    ),
    pytest.param(
        ["boards", "list", "--redis", f"redis://{DEAD}/0"], EXIT_UNAVAILABLE, "boards list", "unreachable", id="boards"
    ),
    pytest.param(
        ["worker", "--kafka-security-protocol", "SSL", "--kafka-ssl-cafile", "/nonexist"],
        EXIT_CONFIG,
        "worker",
        "invalid settings: kafka_ssl_cafile: cannot read /nonexist",
        id="settings",
    ),
]


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOTBOARD_")}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("how", ["option", "environment"])
@pytest.mark.parametrize(("argv", "code", "command", "said"), FAILURES)
def test_every_stderr_line_is_json_with_the_exit_code(
    how: str, argv: list[str], code: int, command: str, said: str
) -> None:
    done = run(["--log-format", "json", *argv]) if how == "option" else run(argv, HOTBOARD_LOG_FORMAT="json")
    assert done.returncode == code, done.stderr
    lines = [orjson.loads(line) for line in done.stderr.splitlines()]  # each line parses, or this fails
    last = lines[-1]
    assert last["level"] == "ERROR" and last["logger"] == "hotboard." + command.replace(" ", ".")
    assert last["command"] == command and last["exit_code"] == code and said in last["message"], last
    assert "p@ss" not in done.stderr, "the password stays masked"


@pytest.mark.parametrize(("argv", "code", "command", "said"), FAILURES)
def test_as_text_the_last_line_is_the_one_a_person_reads(argv: list[str], code: int, command: str, said: str) -> None:
    done = run(argv)
    assert done.returncode == code
    assert done.stderr.splitlines()[-1].startswith(f"hotboard {command}: ") and said in done.stderr


def test_a_settings_error_is_one_line_naming_the_setting_and_the_reason() -> None:
    done = run(["worker", "--window-ms", "5"])
    assert done.returncode == EXIT_CONFIG and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("hotboard worker: invalid settings: window_ms (--window-ms, HOTBOARD_WINDOW_MS): ")
    assert "greater than or equal to 10" in done.stderr and "pydantic.dev" not in done.stderr
    done = run(["worker", "--kafka-security-protocol", "SSL", "--kafka-ssl-cafile", "/nonexist"])
    assert (
        done.stderr
        == "hotboard worker: invalid settings: kafka_ssl_cafile: cannot read /nonexist: No such file or directory\n"
    )
