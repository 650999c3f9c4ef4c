"""Stored data hotboard did not write, seeded straight into a real redis-server: definitions no declare writes,
player meta nested deeper than an answer can hold, board-index members that are not board names. Every answer
is a 200 or a clear error for that board only (503 ``corrupt_data`` naming the key), never a 500, on the fast
path and on the full app alike; ``/v1/boards`` pages past the junk, and every ``next`` it hands out is accepted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from redis.asyncio import Redis

from hotboard import board_store, keys
from hotboard.boards import BoardDef
from reader_api.app import create_app
from reader_api.settings import ApiSettings
from tests.integration.harness import JUNK_DEFINITIONS, seed_junk_definitions
from tests.integration.reader_harness import api_server, asgi_client

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(ApiSettings(redis=redis_url)), raise_app_exceptions=False) as c:
        yield c


def _both_ways(board: str, rest: str) -> list[str]:
    """The request plainly (the fast path takes it where it can) and with the board's first character
    percent-escaped (the fast path hands it to the full app)."""
    return [f"/v1/boards/{board}{rest}", f"/v1/boards/%{ord(board[0]):02X}{board[1:]}{rest}"]


async def _seed_board(redis_client: Redis, board: str) -> None:
    await redis_client.zadd(keys.board_key(board), {"a": 1, "b": 2})
    await redis_client.hset(keys.meta_key(board), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1})


def _error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json().get("error", "")


@pytest.mark.parametrize("board", list(JUNK_DEFINITIONS))
async def test_a_definition_hotboard_did_not_write_is_a_503_for_that_board_only(
    client: httpx.AsyncClient, redis_client: Redis, redis_url: str, board: str
) -> None:
    seed_junk_definitions(redis_url)
    await _seed_board(redis_client, board)
    await _seed_board(redis_client, "fine")
    for suffix in ("/top", "/players/a", "/players/a/around", "/players?ids=a", "", "/periods", "/top?period=current"):
        for path in _both_ways(board, suffix):
            response = await client.get(path)
            assert _error(response) == (503, "corrupt_data"), (path, response.text)
            assert keys.def_key(board) in response.json()["message"], path
            assert response.headers.get("retry-after"), path
    assert (await client.get("/v1/boards/fine/top")).status_code == 200


#: A player meta object nested ``depth`` levels (``{}`` is 1): 252 and more no longer fit in a top page's answer
#: (orjson encodes 254 levels at most, and the answer adds 3); 1025 and more orjson does not even read.
def _deep_meta(depth: int) -> bytes:
    return b'{"m":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize("depth", [252, 254, 255, 300, 1024, 1100])
async def test_meta_nested_deeper_than_an_answer_holds_is_a_503_naming_the_key(
    client: httpx.AsyncClient, redis_client: Redis, depth: int
) -> None:
    await _seed_board(redis_client, "m")
    await redis_client.hset(keys.player_meta_key("m"), mapping={"a": _deep_meta(depth), "b": b'{"ok": 1}'})
    for suffix in ("/top", "/players/a", "/players/a/around", "/players?ids=a,b"):
        for asked in _both_ways("m", suffix):
            response = await client.get(asked)
            assert _error(response) == (503, "corrupt_data"), (asked, response.text)
            assert keys.player_meta_key("m") in response.json()["message"]
    # the pages without that player answer
    assert (await client.get("/v1/boards/m/top?limit=1")).json()["entries"][0]["meta"] == {"ok": 1}
    assert (await client.get("/v1/boards/m/players/b")).status_code == 200


async def test_a_meta_just_within_what_an_answer_holds_is_answered(
    client: httpx.AsyncClient, redis_client: Redis
) -> None:
    await _seed_board(redis_client, "m")
    await redis_client.hset(keys.player_meta_key("m"), "a", _deep_meta(251))
    for path in (
        "/v1/boards/m/top",
        "/v1/boards/m/players/a",
        "/v1/boards/m/players/a/around",
        "/v1/boards/m/players?ids=a,b",
    ):
        assert (await client.get(path)).status_code == 200, path


#: Index members no declare or flush writes: not UTF-8, outside the board alphabet, too long, a terminal escape.
JUNK_NAMES = [b"\xff\xfe", b"a1 b", b"a" * 65, b"b2\x1b[31m", b"c/d", b"", b"\xc3"]


async def _listing(client: httpx.AsyncClient, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Every page of /v1/boards at ``limit``, following ``next``: the boards and the number of pages."""
    seen: list[dict[str, Any]] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": limit} if after is None else {"limit": limit, "after": after}
        response = await client.get("/v1/boards", params=params)
        assert response.status_code == 200, (after, response.text)
        body = response.json()
        seen += body["boards"]
        pages += 1
        assert pages < 100, "paging does not end"
        after = body["next"]
        if after is None:
            return seen, pages


async def test_the_listing_pages_past_members_that_are_not_boards_and_unreadable_definitions(
    client: httpx.AsyncClient, redis_client: Redis, redis_url: str
) -> None:
    good = {f"{prefix}{i}": BoardDef(reset="daily" if i % 2 else "never") for prefix in "abcz" for i in range(3)}
    for name, definition in good.items():
        await board_store.declare(redis_client, name, definition, now_ms=1)
    seed_junk_definitions(redis_url)
    await redis_client.zadd(keys.BOARD_INDEX_KEY, {**{n: 0 for n in JUNK_NAMES}, **dict.fromkeys(JUNK_DEFINITIONS, 0)})
    expected = [{"board": n, **good[n].as_dict()} for n in sorted(good)]
    for limit in (1, 2, 3, 5, 100):
        seen, pages = await _listing(client, limit)
        assert seen == expected, limit
        assert pages <= len(good) // limit + 1


async def test_a_long_run_of_junk_in_the_index_is_paged_past(client: httpx.AsyncClient, redis_client: Redis) -> None:
    """Many junk members between two boards: each page reads past a bounded number of them and hands out a
    cursor that moves on."""
    await board_store.declare(redis_client, "a", BoardDef(), now_ms=1)
    await board_store.declare(redis_client, "z", BoardDef(), now_ms=1)
    await redis_client.zadd(keys.BOARD_INDEX_KEY, {f"b{i:05} junk": 0 for i in range(3000)})
    await redis_client.zadd(keys.BOARD_INDEX_KEY, {f"m{i:05}": 0 for i in range(3)})
    for name in ("m00000", "m00001", "m00002"):
        await redis_client.set(keys.def_key(name), "junk")
    seen, _ = await _listing(client, 1)
    assert [b["board"] for b in seen] == ["a", "z"]


async def test_more_junk_in_a_row_than_a_page_reads_past_is_a_503_naming_the_index(
    client: httpx.AsyncClient, redis_client: Redis
) -> None:
    """The bound: a page reads past MAX_SKIPPED junk members at most, then hands out the last board name it
    passed; with none to hand out, a clear 503 naming the index instead of a page that never ends."""
    await board_store.declare(redis_client, "a", BoardDef(), now_ms=1)
    junk = {f"b{i:05} junk": 0 for i in range(board_store.MAX_SKIPPED + 2000)}
    await redis_client.zadd(keys.BOARD_INDEX_KEY, junk)
    first = await client.get("/v1/boards", params={"limit": 5})
    assert first.status_code == 200 and first.json() == {
        "boards": [{"board": "a", **BoardDef().as_dict()}],
        "next": "a",
    }
    stuck = await client.get("/v1/boards", params={"after": "a"})
    assert _error(stuck) == (503, "corrupt_data") and keys.BOARD_INDEX_KEY in stuck.json()["message"]


def test_a_real_server_answers_stored_junk_without_a_500(redis_url: str, tmp_path: Path) -> None:
    seed_junk_definitions(redis_url)
    client = redis.Redis.from_url(redis_url)
    client.zadd(keys.board_key("m"), {"a": 1})
    client.hset(keys.player_meta_key("m"), "a", _deep_meta(300))
    client.zadd(keys.BOARD_INDEX_KEY, {n: 0 for n in [*JUNK_NAMES, b"ok"]})
    client.close()
    with api_server(redis_url, tmp_path) as server, httpx.Client(base_url=server.url) as http:
        for path in (
            "/v1/boards/junk-keep/top",
            "/v1/boards/junk-utf8/players/a",
            "/v1/boards/junk-spec",
            "/v1/boards/junk-type/periods",
            "/v1/boards/m/top",
            "/v1/boards/m/players/a",
        ):
            response = http.get(path)
            assert _error(response) == (503, "corrupt_data"), (path, response.text)
        listing = http.get("/v1/boards", params={"limit": 1})
        assert listing.status_code == 200 and orjson.loads(listing.content)["boards"][0]["board"] == "ok"


def _redis_cli(url: str, *args: str | bytes) -> str:
    """What the operator types (docs/runbooks.md, HotboardApiErrors)."""
    done = subprocess.run(["redis-cli", "-u", url, *args], capture_output=True, check=True)
    return done.stdout.decode(errors="replace").strip()


def _hotboard(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def test_the_runbooks_remedies_for_corrupt_data_make_every_answer_whole_again(
    client: httpx.AsyncClient, redis_client: Redis, redis_url: str
) -> None:
    """The remedies HotboardApiErrors gives for each ``corrupt_data`` key, run as written with redis-cli and
    ``hotboard boards create``: the board answers 200 again and the listing holds nothing it must page past."""
    seed_junk_definitions(redis_url)
    await _seed_board(redis_client, "junk-keep")
    await _seed_board(redis_client, "m")
    await redis_client.hset(keys.player_meta_key("m"), mapping={"a": _deep_meta(253), "b": b'{"ok": 1}'})
    await redis_client.zadd(keys.BOARD_INDEX_KEY, {**dict.fromkeys(JUNK_NAMES, 0), b"m": 0, b"junk-keep": 0})
    assert _error(await client.get("/v1/boards/junk-keep/top")) == (503, "corrupt_data")
    assert _error(await client.get("/v1/boards/m/players/a")) == (503, "corrupt_data")

    # hb:{B}:def never written by hotboard: DEL it and declare the board again
    _redis_cli(redis_url, "DEL", keys.def_key("junk-keep"))
    _hotboard("boards", "create", "junk-keep", "--redis", redis_url)
    # hb:{B}:pmeta: the message names the player; HDEL that field
    _redis_cli(redis_url, "HDEL", keys.player_meta_key("m"), "a")
    # hb:board-index: ZRANGEBYLEX shows the members that are not board names; ZREM them
    _redis_cli(redis_url, "ZREM", keys.BOARD_INDEX_KEY, *JUNK_NAMES)

    for path in (*_both_ways("junk-keep", "/top"), *_both_ways("m", "/players/a"), "/v1/boards/m/players?ids=a,b"):
        assert (await client.get(path)).status_code == 200, path
    index = await redis_client.zrangebylex(keys.BOARD_INDEX_KEY, "-", "+")
    assert sorted(index) == [b"junk-keep", b"m"]
    listed, _ = await _listing(client, limit=1)
    assert [row["board"] for row in listed] == ["junk-keep", "m"]
