"""Seasons through the read API on a real redis-server: ``?period=`` on every board endpoint and
``GET /v1/boards/{board}/periods``. Period boards are built directly per the layout (``hb:{B@id}`` with its
meta and its copy of B's definition, what a worker's flush writes) and the API's clock is pinned."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from hotboard import board_store, keys
from hotboard.boards import DEFAULT, BoardDef, to_hash
from hotboard.periods import period_board
from reader_api.answers import BoardInfo, FriendsList, Neighbourhood, PeriodList, PlayerRank, TopPage
from reader_api.app import create_app
from reader_api.seasons import Definitions
from reader_api.settings import ApiSettings
from tests.integration.reader_harness import asgi_client, conforms

pytestmark = pytest.mark.integration

WEEKLY = BoardDef(reset="weekly", keep=2, grace_ms=300_000)
#: Wednesday of ISO week 2026-W49 (2026-11-30 .. 2026-12-06): kept are W49 (current), W48 and W47.
NOW = int(datetime(2026, 12, 2, 12, tzinfo=UTC).timestamp()) * 1000
WEEK_MS = 7 * 86_400_000
AS_OF = NOW - 1000


class Clock:
    """The API's clock, moved by the test."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
async def client(redis_url: str, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(ApiSettings(redis=redis_url), clock=clock)) as c:
        yield c


async def build_period(
    redis: Redis, board: str, definition: BoardDef, period_id: str, scores: Mapping[str, int], as_of: int = AS_OF
) -> None:
    """One period board as the worker lays it out: its sorted set, meta and definition copy."""
    name = period_board(board, period_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(keys.def_key(name), mapping={k: v for k, v in to_hash(definition, 1).items()})
        if scores:
            pipe.zadd(keys.board_key(name), dict(scores))
        pipe.hset(keys.meta_key(name), mapping={keys.META_VERSION: 1, keys.META_AS_OF: as_of})
        await pipe.execute()


@pytest.fixture
async def race(redis_client: Redis) -> None:
    """``race`` resets weekly (keep 2): W49 and W48 exist, W47 never started, W46 is past the kept ones."""
    await board_store.declare(redis_client, "race", WEEKLY, now_ms=1)
    await build_period(redis_client, "race", WEEKLY, "2026-W49", {"a": 5, "b": 3})
    await build_period(redis_client, "race", WEEKLY, "2026-W48", {"a": 1, "c": 9}, as_of=AS_OF - WEEK_MS)
    await build_period(redis_client, "race", WEEKLY, "2026-W46", {"z": 1})


async def get_json(client: httpx.AsyncClient, url: str, status: int = 200, **params: Any) -> dict[str, Any]:
    response = await client.get(url, params=params or None)
    assert response.status_code == status, (url, response.text)
    body: dict[str, Any] = response.json()
    return body


def rows(body: dict[str, Any]) -> list[tuple[int, str, int]]:
    return [(e["rank"], e["player"], e["score"]) for e in body["entries"]]


@pytest.mark.usefixtures("race")
async def test_current_previous_and_explicit_periods(client: httpx.AsyncClient) -> None:
    current = await get_json(client, "/v1/boards/race/top")
    conforms(current, TopPage)
    assert current == {
        "board": "race",
        "period": "2026-W49",
        "total": 2,
        "as_of": AS_OF,
        "entries": [
            {"rank": 1, "player": "a", "score": 5, "meta": None},
            {"rank": 2, "player": "b", "score": 3, "meta": None},
        ],
    }
    assert await get_json(client, "/v1/boards/race/top", period="current") == current
    previous = await get_json(client, "/v1/boards/race/top", period="previous")
    assert previous["period"] == "2026-W48" and rows(previous) == [(1, "c", 9), (2, "a", 1)]
    assert await get_json(client, "/v1/boards/race/top", period="2026-W48") == previous

    one = await get_json(client, "/v1/boards/race/players/c", period="previous")
    conforms(one, PlayerRank)
    assert (one["board"], one["period"], one["rank"], one["score"], one["total"]) == ("race", "2026-W48", 1, 9, 2)
    assert (await get_json(client, "/v1/boards/race/players/a"))["rank"] == 1
    assert (await get_json(client, "/v1/boards/race/players/c", 404))["error"] == "player_not_found"
    near = await get_json(client, "/v1/boards/race/players/a/around", period="2026-W48", radius=1)
    conforms(near, Neighbourhood)
    assert near["period"] == "2026-W48" and rows(near) == [(1, "c", 9), (2, "a", 1)]
    friends = await get_json(client, "/v1/boards/race/players", ids="c,b,a")
    conforms(friends, FriendsList)
    assert (
        friends["period"] == "2026-W49" and rows(friends) == [(1, "a", 5), (2, "b", 3)] and friends["missing"] == ["c"]
    )
    info = await get_json(client, "/v1/boards/race", period="previous")
    conforms(info, BoardInfo)
    assert info == {
        "board": "race",
        "period": "2026-W48",
        **WEEKLY.as_dict(),
        "declared": True,
        "size": 2,
        "as_of": AS_OF - WEEK_MS,
        "version": 1,
    }


@pytest.mark.usefixtures("race")
async def test_fast_path_and_full_app_answer_periods_alike(client: httpx.AsyncClient) -> None:
    """An escaped query goes to the full app's parser; a plain one to the fast path: same bytes."""
    for path in ("/top?period=2026{}W48&limit=1", "/players/a?period=2026{}W48", "/players/a/around?period=2026{}W48"):
        fast = await client.get("/v1/boards/race" + path.format("-"))
        full = await client.get("/v1/boards/race" + path.format("%2D"))
        assert fast.status_code == full.status_code == 200 and fast.content == full.content
    fast, full = (
        await client.get("/v1/boards/race/top?period=2026-W46"),
        await client.get("/v1/boards/race/top?period=2026%2DW46"),
    )
    assert fast.status_code == full.status_code == 404 and fast.content == full.content


@pytest.mark.usefixtures("race")
@pytest.mark.parametrize("period", ["2026-W46", "2026-W47", "2026-W50", "2020-W01"])
@pytest.mark.parametrize("path", ["/top", "/players/a", "/players/a/around", "/players?ids=a", ""])
async def test_a_period_not_kept_or_not_started_is_404_naming_the_kept_ones(
    client: httpx.AsyncClient, period: str, path: str
) -> None:
    url, _, ids = f"/v1/boards/race{path}".partition("?ids=")
    body = await get_json(client, url, 404, period=period, **({"ids": ids} if ids else {}))
    assert body["error"] == "period_not_found" and repr(period) in body["message"]
    assert body["message"].endswith("kept periods that exist, newest first: 2026-W49, 2026-W48")


async def test_a_current_period_not_started_yet_is_404(
    client: httpx.AsyncClient, redis_client: Redis, clock: Clock
) -> None:
    await board_store.declare(redis_client, "race", WEEKLY, now_ms=1)
    body = await get_json(client, "/v1/boards/race/top", 404)
    assert body["error"] == "period_not_found" and body["message"].endswith("newest first: none")
    await build_period(redis_client, "race", WEEKLY, "2026-W49", {"a": 5})
    clock.now_ms = NOW + WEEK_MS  # Monday of W50 has come: nothing applied to W50 yet
    body = await get_json(client, "/v1/boards/race/top", 404)
    assert "'2026-W50'" in body["message"] and body["message"].endswith("newest first: 2026-W49")
    assert (await get_json(client, "/v1/boards/race/top", period="previous"))["period"] == "2026-W49"


@pytest.mark.usefixtures("race")
@pytest.mark.parametrize("period", ["2026-W54", "2025-W53", "2026-w49", "2026-12-02", "latest", "", "x" * 33])
async def test_a_malformed_period_is_422(client: httpx.AsyncClient, period: str) -> None:
    for url in ("/v1/boards/race/top", "/v1/boards/race/players/a", "/v1/boards/race"):
        body = await get_json(client, url, 422, period=period)
        assert body["error"] == "invalid_parameter" and body["parameter"] == "period"


async def test_a_board_that_never_resets(client: httpx.AsyncClient, redis_client: Redis) -> None:
    await redis_client.zadd(keys.board_key("plain"), {"a": 1})
    await redis_client.hset(keys.meta_key("plain"), mapping={keys.META_VERSION: 1, keys.META_AS_OF: AS_OF})
    plain = await get_json(client, "/v1/boards/plain/top")
    assert "period" not in plain and rows(plain) == [(1, "a", 1)]
    assert await get_json(client, "/v1/boards/plain/top", period="current") == plain
    for period in ("previous", "2026-W49"):
        body = await get_json(client, "/v1/boards/plain/top", 422, period=period)
        assert body["parameter"] == "period" and "never resets" in body["message"]
    body = await get_json(client, "/v1/boards/plain/periods", 422)
    assert body["parameter"] == "board" and "never resets" in body["message"]
    assert (await get_json(client, "/v1/boards/nope/periods", 404))["error"] == "board_not_found"
    assert (await get_json(client, "/v1/boards/nope/top", 404))["error"] == "board_not_found"


@pytest.mark.usefixtures("race")
async def test_periods_lists_the_kept_ones_that_exist(client: httpx.AsyncClient, clock: Clock) -> None:
    body = await get_json(client, "/v1/boards/race/periods")
    conforms(body, PeriodList)
    w49 = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp()) * 1000
    assert body == {
        "board": "race",
        "reset": "weekly",
        "keep": 2,
        "grace_ms": 300_000,
        "periods": [
            {"id": "2026-W49", "start_ms": w49, "end_ms": w49 + WEEK_MS, "size": 2, "as_of": AS_OF},
            {"id": "2026-W48", "start_ms": w49 - WEEK_MS, "end_ms": w49, "size": 2, "as_of": AS_OF - WEEK_MS},
        ],
    }
    clock.now_ms = NOW + 2 * WEEK_MS  # W51: kept W51, W50, W49
    assert [p["id"] for p in (await get_json(client, "/v1/boards/race/periods"))["periods"]] == ["2026-W49"]


async def test_definitions_are_cached_for_a_short_ttl(redis_client: Redis) -> None:
    """A board just declared seasonal is read as such once the TTL passed; the cache stays bounded."""
    now = [0.0]
    definitions = Definitions(redis_client, ttl_s=5.0, max_entries=2, monotonic=lambda: now[0])
    assert await definitions.get("race") == DEFAULT
    await board_store.declare(redis_client, "race", WEEKLY, now_ms=1)
    now[0] = 4.9
    assert await definitions.get("race") == DEFAULT
    now[0] = 5.0
    assert await definitions.get("race") == WEEKLY
    for board in ("b1", "b2", "b3"):
        await definitions.get(board)
    assert len(definitions) == 2
    await redis_client.hdel(keys.def_key("race"), "spec")
    now[0] = 20.0
    with pytest.raises(Exception, match=r"corrupt|spec"):
        await definitions.get("race")


async def test_a_leap_day_season_lists_its_periods(client: httpx.AsyncClient, redis_client: Redis) -> None:
    """500 kept leap-day periods: walking them back must not run past year 0 (a 500 on every /periods)."""
    leap = BoardDef(reset="0 0 29 2 *", keep=500, grace_ms=0)
    await board_store.declare(redis_client, "leap", leap, now_ms=1)
    await build_period(redis_client, "leap", leap, "20240229T0000Z", {"a": 1})
    await build_period(redis_client, "leap", leap, "19720229T0000Z", {"b": 1})
    body = await get_json(client, "/v1/boards/leap/periods")
    conforms(body, PeriodList)
    assert [p["id"] for p in body["periods"]] == ["20240229T0000Z", "19720229T0000Z"]
    assert (await get_json(client, "/v1/boards/leap/top", period="19720229T0000Z"))["period"] == "19720229T0000Z"


async def redis_commands(redis: Redis) -> int:
    """Commands the server has run so far (scripts' inner calls included), not counting these INFO calls."""
    stats = await redis.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def test_periods_of_a_long_season_cost_a_bounded_number_of_commands(
    client: httpx.AsyncClient, redis_client: Redis, clock: Clock
) -> None:
    """A daily board keeping 1,000 periods cost 3,001 Redis commands per /periods: now the closed periods'
    rows are reused, and a request reads the definition and the live periods only."""
    daily = BoardDef(reset="daily", keep=1000, grace_ms=300_000)
    await board_store.declare(redis_client, "long", daily, now_ms=1)
    for day in ("2026-12-02", "2026-12-01", "2024-03-07"):
        await build_period(redis_client, "long", daily, day, {"a": 1})
    ids = ["2026-12-02", "2026-12-01", "2024-03-07"]
    before = await redis_commands(redis_client)
    assert [p["id"] for p in (await get_json(client, "/v1/boards/long/periods"))["periods"]] == ids
    first = await redis_commands(redis_client) - before
    assert first <= 3 * 1001 + 2
    for _ in range(10):
        before = await redis_commands(redis_client)
        assert [p["id"] for p in (await get_json(client, "/v1/boards/long/periods"))["periods"]] == ids
        assert await redis_commands(redis_client) - before <= 5, "a /periods request cost O(keep) commands"
    await build_period(redis_client, "long", daily, "2026-12-02", {"a": 1, "b": 2})  # the live period moves
    periods = (await get_json(client, "/v1/boards/long/periods"))["periods"]
    assert periods[0]["size"] == 2
