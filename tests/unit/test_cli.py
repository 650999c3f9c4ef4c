"""The CLI is generated from the settings classes: every field is an option, and docs/configuration.md documents
each with its environment variable and default (so adding a field fails here until that page has its row)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest
from pydantic_settings import BaseSettings
from redis.exceptions import ClusterDownError, TryAgainError

import hotboard
from cli.api import ALIASES
from cli.main import build_parser, main
from cli.options import env_var, option, settings_from
from hotboard.settings import LogSettings
from ingest.settings import WorkerSettings
from reader_api.settings import ApiSettings

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
#: command -> (settings class, section of docs/configuration.md holding its configuration table)
COMMANDS: dict[str, tuple[type[BaseSettings], str]] = {
    "worker": (WorkerSettings, "## Worker (`hotboard worker`)"),
    "api": (ApiSettings, "## Read API (`hotboard api`)"),
}


def documented_table(heading: str) -> dict[str, tuple[list[str], str, str]]:
    """env variable -> (options, env, default) from the first ``| option | env | default |`` table under heading."""
    text = CONFIGURATION.read_text()
    section = text[text.index(heading) + len(heading) :]
    section = section[: section.find("\n## ")]
    rows: dict[str, tuple[list[str], str, str]] = {}
    in_table = False
    for line in section.splitlines():
        if line.startswith("| option | env | default |"):
            in_table = True
        elif in_table and line.startswith("|") and not line.startswith("|---"):
            options, env, default = (cell.strip() for cell in line.strip("|").split("|")[:3])
            rows[env.strip("`")] = (re.findall(r"`(--[a-z0-9-]+)`", options), env.strip("`"), default.strip("`"))
        elif in_table and not line.startswith("|"):
            break
    assert rows, f"no configuration table under {heading}"
    return rows


def sample(field_default: object, annotation: object = None) -> str:
    """A valid value different from the default."""
    if get_origin(annotation) is Literal:
        return str(next(c for c in get_args(annotation) if c != field_default))
    if isinstance(field_default, bool):
        return str(not field_default).lower()
    if isinstance(field_default, int | float):
        return str(field_default + 1)
    return "DEBUG" if field_default == "INFO" else f"{field_default}x"


@pytest.mark.parametrize("command", COMMANDS)
def test_docs_document_every_setting_with_its_option_env_and_default(command: str) -> None:
    settings, heading = COMMANDS[command]
    rows = documented_table(heading)
    for name, field in settings.model_fields.items():
        env = env_var(settings, name)
        assert env in rows, f"docs/configuration.md ({heading}) has no row for {env}"
        options, _, default = rows[env]
        assert option(name) in options, f"docs/configuration.md row {env} lacks {option(name)}"
        if isinstance(field.default, bool):
            assert default == str(field.default).lower(), f"docs/configuration.md default of {env}"
        elif isinstance(field.default, int | float):
            assert float(default) == field.default, f"docs/configuration.md default of {env}"
        elif field.default:
            assert default == field.default, f"docs/configuration.md default of {env}"
    stale = set(rows) - {env_var(settings, name) for name in settings.model_fields}
    assert not stale, f"docs/configuration.md documents settings that do not exist: {stale}"


@pytest.mark.parametrize(
    ("name", "heading"),
    [("ArchiverSettings", "## Archiver (`hotboard archiver`)"), ("AuditSettings", "### Audit (`hotboard audit`)")],
)
def test_docs_document_the_archive_commands_own_settings(name: str, heading: str) -> None:
    """The archiver takes every worker setting (documented with the worker) and its own, or redefaulted, ones; the
    audit the archiver's (documented with it) and its own."""
    import archive.settings

    settings: type[BaseSettings] = getattr(archive.settings, name)
    rows = documented_table(heading)
    own = set(settings.__annotations__)
    assert {env_var(settings, n) for n in own} == set(rows)
    for field_name in own:
        field = settings.model_fields[field_name]
        options, _, default = rows[env_var(settings, field_name)]
        assert option(field_name) in options
        assert (float(default) == field.default) if isinstance(field.default, int | float) else default == field.default


@pytest.mark.parametrize(
    ("command", "name"), [(command, name) for command, (cls, _) in COMMANDS.items() for name in cls.model_fields]
)
def test_every_setting_is_reachable_from_the_command_line(command: str, name: str) -> None:
    settings = COMMANDS[command][0]
    value = sample(settings.model_fields[name].default, settings.model_fields[name].annotation)
    spellings = [option(name), *(ALIASES.get(name, []) if command == "api" else [])]
    default = settings.model_fields[name].default
    expected = value == "true" if isinstance(default, bool) else type(default)(value)
    for spelling in spellings:
        args = build_parser().parse_args([command, spelling, value])
        assert getattr(settings_from(settings, args), name) == expected, spelling


def test_command_line_over_environment_over_default(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    assert settings_from(WorkerSettings, parser.parse_args(["worker"])).topic == "scores"
    monkeypatch.setenv("HOTBOARD_TOPIC", "from-env")
    assert settings_from(WorkerSettings, parser.parse_args(["worker"])).topic == "from-env"
    assert settings_from(WorkerSettings, parser.parse_args(["worker", "--topic", "cli"])).topic == "cli"


def test_log_level_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    assert settings_from(LogSettings, parser.parse_args(["--log-level", "WARNING", "worker"])).log_level == "WARNING"
    args = parser.parse_args(["worker", "--log-level", "DEBUG"])  # the documented spelling, upper case, is accepted
    assert settings_from(WorkerSettings, args).log_level == "DEBUG"
    assert settings_from(LogSettings, parser.parse_args(["produce"])).log_level == "INFO"


def test_produce_takes_kafka_and_topic_from_the_worker_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTBOARD_KAFKA", "k:1")
    args = build_parser().parse_args(["produce", "--topic", "t"])
    target = settings_from(WorkerSettings, args)
    assert (target.kafka, target.topic) == ("k:1", "t")


def test_invalid_setting_exits_2_with_the_field_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--window-ms", "5"]) == 2
    assert "window_ms" in capsys.readouterr().err


@pytest.mark.parametrize("acks", ["1", "2"])
def test_replica_acks_on_one_server_are_refused(acks: str, capsys: pytest.CaptureFixture[str]) -> None:
    """One server sends no WAIT: a required count would be ignored, so the worker refuses it before connecting."""
    assert main(["worker", "--redis", "redis://127.0.0.1:1/0", "--min-replica-acks", acks]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"hotboard worker: --min-replica-acks {acks} needs --redis-cluster")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"hotboard {hotboard.__version__}"


@pytest.mark.parametrize("command", ["worker", "api", "rebuild --all"])
@pytest.mark.parametrize(
    "url",
    ["redis://hb:Zq8xK2/pW9vT4@127.0.0.1:1/0", "redis://hb:Zq8xK2#pW9vT4@[::1/0", "http://hb:Zq8xK2pW9vT4@x/0"],
)
def test_a_malformed_redis_url_is_one_line_without_the_password(
    command: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any client exists: exit 2 and one line naming the URL with its password masked, where
    redis-py would raise from inside the first client a message quoting a piece of the password."""
    assert main([*command.split(), "--redis", url]) == 2
    out, err = capsys.readouterr()
    assert (
        out == "" and len(err.splitlines()) == 1 and err.startswith(f"hotboard {command.split()[0]}: invalid --redis ")
    )
    assert "hb:***@" in err
    assert "Zq8xK2" not in err and "pW9vT4" not in err


def test_help_speaks_to_users(capsys: pytest.CaptureFixture[str]) -> None:
    """``hotboard --help`` says what hotboard is and where to start; no command's help shows source markup, and
    the dev tools show their defaults."""
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "Real-time leaderboards" in text and "./dev demo" in text and "docs/" in text
    for command in ("worker", "api", "boards", "send", "dlq", "produce", "dev", "demo", "restore", "rebuild", "audit"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        shown = capsys.readouterr().out
        assert "``" not in shown and ":mod:" not in shown, command
        if command in ("produce", "dev", "demo"):
            assert "(default: " in shown, command


#: Options that choose what one run acts on, not how the process is configured: no environment variable (a stale
#: ``HOTBOARD_ACCEPT_RETENTION_LOSS`` would accept a loss nobody asked for).
RUN_CHOICES = {"--help", "--all", "--board", "--accept-retention-loss"}


def subcommand_options(command: str) -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.option_strings]


@pytest.mark.parametrize("command", ["audit", "restore", "rebuild"])
def test_every_option_of_the_archive_commands_names_its_environment_variable(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every generated option does (:mod:`cli.options`): its help names ``HOTBOARD_<NAME>``, and that variable
    sets it, so an option written by hand beside the generated ones cannot go without one."""
    options = [a for a in subcommand_options(command) if not set(a.option_strings) & RUN_CHOICES]
    assert options
    for action in options:
        env = f"HOTBOARD_{action.dest.upper()}"
        assert f"({env}" in (action.help or ""), f"hotboard {command} {action.option_strings[0]}: help names no {env}"
    from archive.settings import ArchiverSettings, AuditSettings

    settings = AuditSettings if command == "audit" else ArchiverSettings
    argv = [command] if command == "audit" else [command, "--all"]
    for action in options:
        field = settings.model_fields[action.dest]
        monkeypatch.setenv(env_var(settings, action.dest), sample(field.default, field.annotation))
        value = getattr(settings_from(settings, build_parser().parse_args(argv)), action.dest)
        monkeypatch.delenv(env_var(settings, action.dest))
        assert value != field.default, f"hotboard {command}: {env_var(settings, action.dest)} is not read"


@pytest.mark.parametrize("where", ["option", "environment"])
def test_audit_snapshot_timeout_must_be_above_0(
    where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything is read (nothing listens on port 1: an accepted 0 would be exit 3, not 2)."""
    argv = [
        "audit",
        "--redis",
        "redis://127.0.0.1:1/0",
        "--postgres",
        "postgresql://127.0.0.1:1/x",
        "--kafka",
        "127.0.0.1:1",
    ]
    if where == "option":
        argv += ["--snapshot-timeout-s", "0"]
    else:
        monkeypatch.setenv("HOTBOARD_SNAPSHOT_TIMEOUT_S", "0")
    assert main(argv) == 2
    assert "snapshot_timeout_s" in capsys.readouterr().err


@pytest.mark.parametrize("error", [ClusterDownError("CLUSTERDOWN The cluster is down"), TryAgainError("TRYAGAIN")])
def test_restore_on_a_cluster_mid_failover_exits_3_to_be_run_again(
    error: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster failing over or moving a slot is an outage like an unreachable one (exit 3, one line), not a
    crash with a traceback (exit 1)."""

    class Down:
        async def ping(self) -> None:
            raise error

        async def aclose(self) -> None:
            return None

    monkeypatch.setattr("hotboard.redis_connect.connect", lambda *_, **__: Down())
    argv = ["restore", "--all", "--redis", "redis://127.0.0.1:1/0", "--postgres", "postgresql://127.0.0.1:1/x"]
    assert main(argv) == 3
    assert "Traceback" not in capsys.readouterr().err
