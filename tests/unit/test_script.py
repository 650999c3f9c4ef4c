"""The one script path (hotboard.script): a script declaring ``no-writes`` goes out as EVALSHA_RO (a read command,
which a cluster client reading from replicas sends to a replica), its NOSCRIPT answered by EVAL_RO with the text
(a replica never got the SCRIPT LOAD); every other script stays EVALSHA, loaded on NOSCRIPT."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
from redis.crc import key_slot
from redis.exceptions import NoScriptError

from flusher import redis_sink
from hotboard import lua, lua_reads, redis_client
from hotboard.redis_client import Client
from hotboard.script import Script, no_writes
from reader_api import snapshot, waits
from reader_api.snapshot import top_call
from reader_api.streams import RedisReads

READS = [lua_reads.TOP, lua_reads.PLAYER, lua_reads.AROUND, lua_reads.PLAYERS, lua_reads.BOARD, lua_reads.MARKS]


class Capture:
    """A client that records every command and answers NOSCRIPT to the first ``unknown`` EVALSHA(_RO)s."""

    def __init__(self, unknown: int = 0) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.loaded: list[str] = []
        self.unknown = unknown

    def _answer(self, args: tuple[Any, ...]) -> Any:
        self.sent.append(args)
        if args[0] in ("EVALSHA", "EVALSHA_RO") and self.unknown:
            self.unknown -= 1
            return NoScriptError("No matching script")
        return [1, args[0]]

    async def execute_command(self, *args: Any) -> Any:
        reply = self._answer(args)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def script_load(self, text: str) -> str:
        self.loaded.append(text)
        return ""

    @asynccontextmanager
    async def pipeline(self, transaction: bool = False) -> AsyncIterator[Capture]:
        queued: list[tuple[Any, ...]] = []
        outer = self

        class Pipe:
            def execute_command(self, *args: Any) -> None:
                queued.append(args)

            async def execute(self, raise_on_error: bool = True) -> list[Any]:
                return [outer._answer(args) for args in queued]

        yield cast(Capture, Pipe())


@pytest.mark.parametrize("text", READS)
def test_every_read_script_declares_no_writes_and_goes_out_as_evalsha_ro(text: str) -> None:
    script = Script(text)
    assert script.read_only
    assert script.command(["k"], [1]) == ["EVALSHA_RO", script.sha, 1, "k", 1]
    assert script.again(["k"], [1]) == ["EVAL_RO", text, 1, "k", 1]


def test_the_read_apis_scripts_are_the_read_only_ones() -> None:
    for script in (snapshot._TOP, snapshot._PLAYER, snapshot._AROUND, snapshot._PLAYERS, snapshot._BOARD, waits._MARKS):
        assert script.read_only and script.command([], [])[0] == "EVALSHA_RO"


@pytest.mark.parametrize("text", [lua.FLUSH, lua.APPLY, lua.LOOKUP, lua.CHECKPOINT])
def test_a_script_that_may_write_stays_evalsha(text: str) -> None:
    script = Script(text)
    assert not script.read_only
    assert script.command(["k"], []) == script.again(["k"], []) == ["EVALSHA", script.sha, 1, "k"]
    assert redis_sink._FLUSH.command([], [])[0] == "EVALSHA"


@pytest.mark.parametrize(
    ("first_line", "read_only"),
    [
        ("#!lua flags=no-writes", True),
        ("#!lua flags=allow-stale,no-writes", True),
        ("#!lua name=x flags=no-writes", True),
        ("#!lua", False),
        ("#!lua flags=no-cluster", False),
        ("-- flags=no-writes", False),
        ("local x = 1 -- #!lua flags=no-writes", False),
    ],
)
def test_no_writes_reads_the_shebang_line_only(first_line: str, read_only: bool) -> None:
    assert no_writes(f"{first_line}\nreturn 1") is read_only
    assert not no_writes(f"return 1\n{first_line}")


def test_a_read_scripts_noscript_runs_its_text_as_eval_ro_without_loading_it() -> None:
    redis = Capture(unknown=1)
    script = Script(lua_reads.TOP)
    assert asyncio.run(script(cast(Client, redis), ["k"], [0, 10, ""])) == [1, "EVAL_RO"]
    assert redis.sent == [("EVALSHA_RO", script.sha, 1, "k", 0, 10, ""), ("EVAL_RO", lua_reads.TOP, 1, "k", 0, 10, "")]
    assert redis.loaded == []


def test_a_write_scripts_noscript_loads_it_and_sends_evalsha_again() -> None:
    redis = Capture(unknown=1)
    script = Script(lua.LOOKUP)
    asyncio.run(script(cast(Client, redis), ["k"], []))
    assert redis.sent == [("EVALSHA", script.sha, 1, "k"), ("EVALSHA", script.sha, 1, "k")]
    assert redis.loaded == [lua.LOOKUP]


def test_the_streams_pipeline_sends_evalsha_ro_and_resends_a_noscript_one_as_eval_ro() -> None:
    redis = Capture(unknown=1)
    calls = [top_call("b", 0, 3), top_call("c", 0, 3)]
    replies = asyncio.run(RedisReads(cast(Client, redis)).replies(calls))
    assert replies == [[1, "EVAL_RO"], [1, "EVALSHA_RO"]]
    assert [args[0] for args in redis.sent] == ["EVALSHA_RO", "EVALSHA_RO", "EVAL_RO"]
    assert redis.sent[2][1] == lua_reads.TOP


def test_the_cluster_client_finds_a_read_scripts_slot_without_asking_a_node() -> None:
    """No server listens: ``COMMAND GETKEYS`` (redis-py's way for movable-keys commands) would fail."""
    client = redis_client.connect("redis://127.0.0.1:1", cluster=True, read_from_replicas=True)
    keys = ["hb:{b}:board", "hb:{b}:meta"]
    for command in ("EVALSHA_RO", "EVAL_RO", "EVALSHA"):
        slot = asyncio.run(client._determine_slot(command, "sha", 2, *keys, "arg"))  # type: ignore[union-attr]
        assert slot == key_slot(b"hb:{b}:board")
