"""Board semantics through the read API on a real redis-server: every order x tie policy against the reference
ranking, display metadata on every answer, and the board listing. Boards are built directly in Redis per the
layout of :mod:`hotboard.boards` (what the workers write), so these tests hold the read side to that layout."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from hotboard import board_store, keys
from hotboard.boards import DEFAULT, ORDERS, TIE_DIGITS, TIES, BoardDef
from reader_api.answers import BoardInfo, BoardList, FriendsList, Neighbourhood, PlayerRank, TopPage
from reader_api.app import create_app
from reader_api.settings import ApiSettings
from tests.integration.reader_harness import asgi_client, conforms, reference_ranking

pytestmark = pytest.mark.integration

#: The season fields of a board that never resets.
NEVER = {"reset": "never", "keep": 4, "grace_ms": 60_000}

AS_OF = 1_700_000_000_000


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(ApiSettings(redis=redis_url))) as c:
        yield c


async def build(
    redis: Redis,
    board: str,
    scores: Mapping[str, int],
    definition: BoardDef = DEFAULT,
    times: Mapping[str, int] | None = None,
    metas: Mapping[str, dict[str, Any]] | None = None,
) -> None:
    """The board as the workers lay it out: declared first (a written board's definition is fixed)."""
    if definition != DEFAULT:
        await board_store.declare(redis, board, definition, now_ms=1)
    sign = definition.sign
    async with redis.pipeline(transaction=True) as pipe:
        if definition.earliest:
            assert times is not None
            members = {p: f"{times[p]:0{TIE_DIGITS}d}{p}" for p in scores}
            pipe.zadd(keys.board_key(board), {members[p]: sign * s for p, s in scores.items()})
            pipe.hset(keys.members_key(board), mapping={p: m for p, m in members.items()})
        elif scores:
            pipe.zadd(keys.board_key(board), {p: sign * s for p, s in scores.items()})
        if definition.ties == "dense" and scores:
            counts: dict[int, int] = {}
            for s in scores.values():
                counts[sign * s] = counts.get(sign * s, 0) + 1
            pipe.zadd(keys.dense_key(board), {str(s): s for s in counts})
            pipe.hset(keys.counts_key(board), mapping={str(s): n for s, n in counts.items()})
        if metas:
            pipe.hset(keys.player_meta_key(board), mapping={p: orjson.dumps(m) for p, m in metas.items()})
        pipe.hset(keys.meta_key(board), mapping={keys.META_VERSION: 1, keys.META_AS_OF: AS_OF})
        pipe.zadd(keys.BOARD_INDEX_KEY, {board: 0})
        await pipe.execute()


async def get_json(client: httpx.AsyncClient, url: str, status: int = 200, **params: Any) -> dict[str, Any]:
    given = {k: v for k, v in params.items() if v is not None}
    response = await client.get(url, params=given or None)
    assert response.status_code == status, (url, response.text)
    body: dict[str, Any] = response.json()
    return body


def rows(body: dict[str, Any]) -> list[tuple[int, str, int]]:
    return [(e["rank"], e["player"], e["score"]) for e in body["entries"]]


@pytest.mark.parametrize(
    ("order", "ties", "scores", "ranks"),
    [
        ("desc", "shared", [10, 8, 8, 5], [1, 2, 2, 4]),
        ("desc", "dense", [10, 8, 8, 5], [1, 2, 2, 3]),
        ("asc", "shared", [5, 8, 8, 10], [1, 2, 2, 4]),
        ("asc", "dense", [5, 8, 8, 10], [1, 2, 2, 3]),
        ("desc", "lexical", [10, 8, 8, 5], [1, 2, 3, 4]),
        ("asc", "earliest", [5, 8, 8, 10], [1, 2, 3, 4]),
    ],
)
async def test_tie_policies_on_a_small_board(
    client: httpx.AsyncClient, redis_client: Redis, order: str, ties: str, scores: list[int], ranks: list[int]
) -> None:
    """Ranks on top pages, around-me, rank and friends lists (the page's later ranks are computed in Lua from
    the first one: start the page on the tied pair and past it, too)."""
    definition = BoardDef(order, "incr", ties)  # type: ignore[arg-type]
    players = ["p0", "p1", "p2", "p3"]
    await build(redis_client, "b", dict(zip(players, scores, strict=True)), definition, {p: 7 for p in players})
    top = await get_json(client, "/v1/boards/b/top")
    assert [e["rank"] for e in top["entries"]] == ranks and [e["score"] for e in top["entries"]] == scores
    for offset in range(4):
        page = await get_json(client, "/v1/boards/b/top", offset=offset, limit=2)
        assert [e["rank"] for e in page["entries"]] == ranks[offset : offset + 2]
    for i, player in enumerate(e["player"] for e in top["entries"]):
        assert (await get_json(client, f"/v1/boards/b/players/{player}"))["rank"] == ranks[i]
        near = await get_json(client, f"/v1/boards/b/players/{player}/around", radius=1)
        assert [e["rank"] for e in near["entries"]] == ranks[max(0, i - 1) : i + 2]
    friends = await get_json(client, "/v1/boards/b/players", ids="p3,p2,p1,p0")
    assert sorted(e["rank"] for e in friends["entries"]) == ranks


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("ties", TIES)
@pytest.mark.parametrize("seed", [1, 2])
async def test_every_definition_matches_the_reference(
    client: httpx.AsyncClient, redis_client: Redis, order: str, ties: str, seed: int
) -> None:
    """Many ties, negative scores, tie times that collide (so ``earliest`` falls back to the id)."""
    rng = random.Random(seed)
    size = 80
    scores = {f"p{i}": rng.choice((-3, 0, 0, 2, 2, 2, 9)) for i in range(size)}
    times = {p: rng.randrange(5) for p in scores}
    metas = {p: {"name": p.upper()} for p in list(scores)[::3]}
    definition = BoardDef(order, "incr", ties)  # type: ignore[arg-type]
    await build(redis_client, "r", scores, definition, times, metas)
    ref = reference_ranking(scores, order, ties, times)

    listed: list[dict[str, Any]] = []
    for offset in range(0, size, 9):
        body = await get_json(client, "/v1/boards/r/top", limit=9, offset=offset)
        conforms(body, TopPage)
        assert rows(body) == ref[offset : offset + 9]
        listed += body["entries"]
    assert all(e["meta"] == metas.get(e["player"]) for e in listed)

    for index in rng.sample(range(size), 12):
        rank, player, score = ref[index]
        one = await get_json(client, f"/v1/boards/r/players/{player}")
        conforms(one, PlayerRank)
        assert (one["rank"], one["score"], one["meta"]) == (rank, score, metas.get(player))
        near = await get_json(client, f"/v1/boards/r/players/{player}/around", radius=4)
        conforms(near, Neighbourhood)
        assert rows(near) == ref[max(0, index - 4) : index + 5]
        assert all(e["meta"] == metas.get(e["player"]) for e in near["entries"])

    asked = rng.sample(list(scores), 20)
    friends = await get_json(client, "/v1/boards/r/players", ids=",".join([*asked, "nobody"]))
    conforms(friends, FriendsList)
    expected = sorted((r for r in ref if r[1] in asked), key=lambda r: (r[0], asked.index(r[1])))
    assert rows(friends) == expected and friends["missing"] == ["nobody"]
    assert all(e["meta"] == metas.get(e["player"]) for e in friends["entries"])


@pytest.mark.parametrize("order", ORDERS)
async def test_earliest_ranks_who_got_there_first(client: httpx.AsyncClient, redis_client: Redis, order: str) -> None:
    scores = {"late": 10, "b-early": 10, "a-early": 10, "other": 3 if order == "desc" else 30}
    times = {"late": 9_000, "b-early": 1_000, "a-early": 1_000, "other": 1}
    await build(redis_client, "e", scores, BoardDef(order, "incr", "earliest"), times)  # type: ignore[arg-type]
    top = await get_json(client, "/v1/boards/e/top")
    assert rows(top) == [(1, "a-early", 10), (2, "b-early", 10), (3, "late", 10), (4, "other", scores["other"])]
    stored = await redis_client.zscore(keys.board_key("e"), f"{1000:016d}a-early")
    assert stored == (-10 if order == "desc" else 10)
    assert (await get_json(client, "/v1/boards/e/players/late"))["score"] == 10


async def test_meta_is_null_without_a_pmeta_hash_and_corrupt_meta_is_a_503(
    client: httpx.AsyncClient, redis_client: Redis
) -> None:
    await build(redis_client, "m", {"a": 2, "b": 1})
    for url in ("/v1/boards/m/top", "/v1/boards/m/players/a/around", "/v1/boards/m/players?ids=a,b"):
        assert all(e["meta"] is None for e in (await get_json(client, url))["entries"])
    assert (await get_json(client, "/v1/boards/m/players/a"))["meta"] is None
    await redis_client.hset(keys.player_meta_key("m"), "b", b"[not an object]")
    await redis_client.hincrby(keys.meta_key("m"), keys.META_VERSION, 1)  # else the cached top page answers
    assert (await get_json(client, "/v1/boards/m/players/a"))["meta"] is None
    body = await get_json(client, "/v1/boards/m/top", 503)
    assert body["error"] == "corrupt_data" and keys.player_meta_key("m") in body["message"]


async def test_boards_are_listed_in_pages(client: httpx.AsyncClient, redis_client: Redis) -> None:
    definitions = [BoardDef(ORDERS[i % 2], "incr", TIES[i % 4]) for i in range(250)]
    names = [f"board-{i:03}" for i in range(250)]
    for name, definition in zip(names, definitions, strict=True):
        await board_store.declare(redis_client, name, definition, now_ms=1)
    seen: list[dict[str, Any]] = []
    after: str | None = None
    pages = 0
    while True:
        body = await get_json(client, "/v1/boards", limit=100, after=after)
        conforms(body, BoardList)
        seen += body["boards"]
        pages += 1
        after = body["next"]
        if after is None:
            break
    assert pages == 3 and [b["board"] for b in seen] == names
    assert seen == [{"board": n, **d.as_dict()} for n, d in zip(names, definitions, strict=True)]
    first = await get_json(client, "/v1/boards")
    assert len(first["boards"]) == 100 and first["next"] == "board-099"
    assert (await get_json(client, "/v1/boards", after="board-248"))["boards"][0]["board"] == "board-249"
    assert await get_json(client, "/v1/boards", after="zzz") == {"boards": [], "next": None}
    await redis_client.hdel(keys.def_key("board-120"), "spec")  # not a definition hotboard writes
    body = await get_json(client, "/v1/boards", after="board-099")  # left out: the others are still listed
    assert [b["board"] for b in body["boards"]] == [n for n in names[100:201] if n != "board-120"]
    assert body["next"] == "board-200"
    assert (await get_json(client, "/v1/boards/board-120", 503))["error"] == "corrupt_data"


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"after": "bad board"}, "after"),
        ({"after": ""}, "after"),
        ({"after": "b" * 65}, "after"),
    ],
)
async def test_bad_listing_parameters_are_422(
    client: httpx.AsyncClient, params: dict[str, Any], parameter: str
) -> None:
    body = await get_json(client, "/v1/boards", 422, **params)
    assert body["parameter"] == parameter


async def test_one_board(client: httpx.AsyncClient, redis_client: Redis) -> None:
    await board_store.declare(redis_client, "speedrun", BoardDef("asc", "best", "earliest"), now_ms=1)
    declared = await get_json(client, "/v1/boards/speedrun")
    conforms(declared, BoardInfo)
    assert declared == {
        "board": "speedrun",
        "order": "asc",
        "operator": "best",
        "ties": "earliest",
        **NEVER,
        "declared": True,
        "size": 0,
        "as_of": None,
        "version": None,
    }
    # Declared, nothing applied yet: an empty board, not an unknown one.
    assert await get_json(client, "/v1/boards/speedrun/top") == {
        "board": "speedrun",
        "total": 0,
        "entries": [],
        "as_of": None,
    }
    assert (await get_json(client, "/v1/boards/speedrun/players/a", 404))["error"] == "player_not_found"
    await build(redis_client, "plain", {"a": 1, "b": 2})
    assert await get_json(client, "/v1/boards/plain") == {
        "board": "plain",
        "order": "desc",
        "operator": "incr",
        "ties": "shared",
        **NEVER,
        "declared": False,
        "size": 2,
        "as_of": AS_OF,
        "version": 1,
    }
    assert (await get_json(client, "/v1/boards/nope", 404))["error"] == "board_not_found"
    assert (await get_json(client, "/v1/boards/bad%20board", 422))["parameter"] == "board"
