"""The read API against a real redis-server, checked against a reference ranking computed in Python."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from redis.asyncio import Redis

from cli.devstack import RedisServer
from hotboard import keys
from reader_api.answers import ErrorBody, FriendsList, Neighbourhood, PlayerRank, TopPage
from reader_api.app import create_app
from reader_api.settings import ApiSettings
from tests.integration.reader_harness import api_process, asgi_client, conforms, metrics_text, reference_ranking

pytestmark = pytest.mark.integration

BOARD = "g:1.x-y"
ODD_IDS = ["a:b.c-d", "x y", "a/b", "é-ü", "100%", "?q=1&r", "#frag", "..x", "+plus"]


def path(board: str, *parts: str) -> str:
    return "/v1/boards/" + quote(board, safe="") + "".join("/" + quote(p, safe="") for p in parts)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(ApiSettings(redis=redis_url))) as c:
        yield c


async def load_board(redis: Redis, board: str, scores: dict[str, int], version: int | None = 1) -> None:
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(keys.board_key(board), keys.meta_key(board))
        if scores:
            pipe.zadd(keys.board_key(board), scores)
        if version is not None:
            pipe.hset(keys.meta_key(board), mapping={keys.META_VERSION: version, keys.META_AS_OF: 1_700_000_000_000})
        await pipe.execute()


def random_board(seed: int, size: int) -> dict[str, int]:
    """Few distinct scores (many ties), negative ones too, and ids with every allowed odd character."""
    rng = random.Random(seed)
    ids = [*ODD_IDS, *(f"p{i}" for i in range(size))][:size]
    return {player: rng.randint(-5, 5) * rng.choice((1, 1000)) for player in ids}


def entries(ranking: list[tuple[int, str, int]], metas: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{"rank": r, "player": p, "score": s, "meta": (metas or {}).get(p)} for r, p, s in ranking]


async def get_json(client: httpx.AsyncClient, url: str, status: int = 200, **params: Any) -> dict[str, Any]:
    response = await client.get(url, params=params)
    assert response.status_code == status, (url, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize(("seed", "size"), [(1, 1), (2, 2), (3, 9), (4, 60), (5, 301)])
async def test_every_endpoint_matches_the_reference(
    client: httpx.AsyncClient, redis_client: Redis, seed: int, size: int
) -> None:
    scores = random_board(seed, size)
    await load_board(redis_client, BOARD, scores)
    ref = reference_ranking(scores)

    pages: list[dict[str, Any]] = []
    for offset in range(0, size + 7, 7):
        body = await get_json(client, path(BOARD, "top"), limit=7, offset=offset)
        conforms(body, TopPage)
        assert body["total"] == size and body["board"] == BOARD and body["as_of"] == 1_700_000_000_000
        assert body["entries"] == entries(ref[offset : offset + 7])
        pages += body["entries"]
    assert pages == entries(ref)
    full = await get_json(client, path(BOARD, "top"), limit=1000)
    assert full["entries"] == entries(ref[:1000])
    past = await get_json(client, path(BOARD, "top"), offset=size + 5)
    assert past["entries"] == [] and past["total"] == size

    for index in sorted({0, len(ref) // 2, len(ref) - 1}):
        rank, player, score = ref[index]
        one = await get_json(client, path(BOARD, "players", player))
        conforms(one, PlayerRank)
        assert one == {
            "board": BOARD,
            "player": player,
            "rank": rank,
            "score": score,
            "meta": None,
            "total": size,
            "as_of": 1_700_000_000_000,
        }
        for radius in (0, 1, 3, 100):
            near = await get_json(client, path(BOARD, "players", player, "around"), radius=radius)
            conforms(near, Neighbourhood)
            assert near["entries"] == entries(ref[max(0, index - radius) : index + radius + 1])
            assert near["player"] == player and near["total"] == size

    rng = random.Random(seed)
    asked = rng.sample([p for _, p, _ in ref], min(size, 30))
    unknown = ["nobody", "also:nobody"]
    ids = [*asked, unknown[0], *asked[:2], unknown[1]]
    friends = await get_json(client, path(BOARD, "players"), ids=",".join(ids))
    conforms(friends, FriendsList)
    # by rank; players sharing one, in the order asked
    assert friends["entries"] == entries(
        sorted((r for r in ref if r[1] in asked), key=lambda r: (r[0], asked.index(r[1])))
    )
    assert friends["missing"] == unknown and friends["total"] == size


async def test_around_is_clipped_at_both_ends(client: httpx.AsyncClient, redis_client: Redis) -> None:
    scores = {f"p{i:02}": 100 - i for i in range(20)}
    await load_board(redis_client, BOARD, scores)
    top = await get_json(client, path(BOARD, "players", "p00", "around"), radius=5)
    assert [e["rank"] for e in top["entries"]] == list(range(1, 7))
    bottom = await get_json(client, path(BOARD, "players", "p19", "around"), radius=5)
    assert [e["rank"] for e in bottom["entries"]] == list(range(15, 21))
    default = await get_json(client, path(BOARD, "players", "p10", "around"))
    assert [e["rank"] for e in default["entries"]] == list(range(6, 17))


async def test_empty_and_unknown_boards(client: httpx.AsyncClient, redis_client: Redis) -> None:
    await redis_client.hset(keys.meta_key("empty"), mapping={keys.META_VERSION: 4, keys.META_AS_OF: 5})
    assert await get_json(client, path("empty", "top")) == {"board": "empty", "total": 0, "entries": [], "as_of": 5}
    friends = await get_json(client, path("empty", "players"), ids="a,b")
    assert friends["entries"] == [] and friends["missing"] == ["a", "b"]
    await get_json(client, path("empty", "players", "a"), 404)
    await redis_client.zadd(keys.board_key("unflushed"), {"a": 1})
    assert (await get_json(client, path("unflushed", "players", "a")))["as_of"] is None
    for url in (path("nope", "top"), path("nope", "players", "a"), path("nope", "players", "a", "around")):
        body = await get_json(client, url, 404)
        conforms(body, ErrorBody)
        assert body["error"] == "board_not_found"
    assert (await get_json(client, path("nope", "players"), 404, ids="a"))["error"] == "board_not_found"
    missing = await get_json(client, path("unflushed", "players", "zz", "around"), 404)
    assert missing["error"] == "player_not_found"


@pytest.mark.parametrize(
    ("url", "params", "parameter"),
    [
        (path(BOARD, "top"), {"limit": 0}, "limit"),
        (path(BOARD, "top"), {"limit": 1001}, "limit"),
        (path(BOARD, "top"), {"limit": "ten"}, "limit"),
        (path(BOARD, "top"), {"offset": -1}, "offset"),
        (path(BOARD, "players", "a", "around"), {"radius": 101}, "radius"),
        (path(BOARD, "players", "a", "around"), {"radius": -1}, "radius"),
        (path(BOARD, "players"), {}, "ids"),
        (path(BOARD, "players"), {"ids": ",".join(f"p{i}" for i in range(201))}, "ids"),
        (path(BOARD, "players"), {"ids": "a,,b"}, "ids"),
        (path(BOARD, "players"), {"ids": "a,b\x07"}, "ids"),
        (path("bad/board", "top"), {}, "board"),
        (path("b" * 65, "top"), {}, "board"),
        (path("bad board", "players", "a"), {}, "board"),
        (path(BOARD, "players", "p" * 129), {}, "player"),
        (path(BOARD, "players", "a\tb", "around"), {}, "player"),
        (path(BOARD, "players", "a\x1fb"), {}, "player"),
    ],
)
async def test_bad_parameters_are_422_naming_the_parameter(
    client: httpx.AsyncClient, redis_client: Redis, url: str, params: dict[str, Any], parameter: str
) -> None:
    await load_board(redis_client, BOARD, {"a": 1})
    body = await get_json(client, url, 422, **params)
    assert body["parameter"] == parameter and parameter in body["message"]


async def test_redis_down_is_503_with_retry_after(redis_server: RedisServer) -> None:
    redis = Redis.from_url(redis_server.url)
    await load_board(redis, BOARD, {"a": 1})
    await redis.aclose()
    settings = ApiSettings(redis=redis_server.url, api_redis_timeout_s=0.5)
    async with asgi_client(create_app(settings)) as client:
        await get_json(client, path(BOARD, "players", "a"))
        assert (await client.get("/readyz")).status_code == 200
        redis_server.stop()
        started = time.monotonic()
        for url in (path(BOARD, "top"), path(BOARD, "players", "a"), path(BOARD, "players", "a", "around"), "/readyz"):
            response = await client.get(url)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            assert response.json()["error"] == "redis_unavailable"
        assert time.monotonic() - started < 10
        assert (await client.get("/healthz")).status_code == 200
        redis_server.start()
        await get_json(client, path(BOARD, "players", "a"))


async def test_cache_serves_only_the_current_version(client: httpx.AsyncClient, redis_client: Redis) -> None:
    await load_board(redis_client, BOARD, {"a": 1, "b": 2}, version=1)
    first = await get_json(client, path(BOARD, "top"))
    assert await get_json(client, path(BOARD, "top")) == first
    await load_board(redis_client, BOARD, {"a": 3, "b": 2}, version=2)
    second = await get_json(client, path(BOARD, "top"))
    assert [e["player"] for e in second["entries"]] == ["a", "b"]
    # Written without a version bump (not the flusher's way): never cached, so still right.
    await load_board(redis_client, BOARD, {"c": 9}, version=None)
    assert [e["player"] for e in (await get_json(client, path(BOARD, "top")))["entries"]] == ["c"]
    assert [e["player"] for e in (await get_json(client, path(BOARD, "top")))["entries"]] == ["c"]
    metrics = metrics_text(client)
    assert 'hotboard_api_cache_total{result="hit"} 1.0' in metrics
    assert 'hotboard_api_cache_total{result="miss"} 4.0' in metrics


async def test_tiny_distinct_pages_do_not_evict_the_popular_page(redis_url: str, redis_client: Redis) -> None:
    """A client asking ``?limit=1&offset=N`` for every N does not empty the top-page cache for everyone."""
    await load_board(redis_client, BOARD, {f"p{i}": i for i in range(300)}, version=1)
    app = create_app(ApiSettings(redis=redis_url, api_cache_size=16))
    async with asgi_client(app) as client:
        registry = app.state.reader.metrics.registry

        def hits() -> float:
            return registry.get_sample_value("hotboard_api_cache_total", {"result": "hit"}) or 0.0

        for _ in range(2):
            await get_json(client, path(BOARD, "top"))
        assert hits() == 1
        for offset in range(200):
            await get_json(client, path(BOARD, "top"), limit=1, offset=offset)
        assert hits() == 1
        await get_json(client, path(BOARD, "top"))
        assert hits() == 2, "the popular page was evicted by pages asked once"


async def test_metrics_use_route_templates(client: httpx.AsyncClient, redis_client: Redis) -> None:
    await load_board(redis_client, BOARD, {"secret-player": 1})
    await get_json(client, path(BOARD, "players", "secret-player"))
    await get_json(client, path(BOARD, "players", "nobody"), 404)
    await client.get("/no/such/path")
    text = metrics_text(client)
    assert "secret-player" not in text and BOARD not in text and "nobody" not in text
    assert (
        'hotboard_api_requests_total{method="GET",route="/v1/boards/{board}/players/{player}",status="200"} 1.0' in text
    )
    assert 'hotboard_api_requests_total{method="GET",route="/v1/boards/{board}/players/{player}",status="404"}' in text
    assert 'hotboard_api_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert 'hotboard_api_request_seconds_bucket{le="0.005",route="/v1/boards/{board}/players/{player}"}' in text


def window_scores(version: int) -> dict[str, int]:
    """The board after window ``version``: its size and every score are a function of the version."""
    size = 30 + (version * 37) % 90
    return {f"p{i}": (version * 7 + i * 13) % 41 - 20 for i in range(size)}


REWRITE = """
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 2 do redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i]) end
redis.call('HSET', KEYS[2], 'version', ARGV[1], 'as_of', ARGV[1])
"""


async def test_every_response_is_one_snapshot(client: httpx.AsyncClient, redis_url: str) -> None:
    """A writer replaces the whole board window by window (as_of = version, so each response says which
    snapshot it claims to be); concurrent readers must never see a mix of two windows."""
    windows = 300
    writer_redis = Redis.from_url(redis_url)
    rewrite = writer_redis.register_script(REWRITE)
    await rewrite(keys=[keys.board_key(BOARD), keys.meta_key(BOARD)], args=[1, *_flat(window_scores(1))])
    seen: set[int] = set()

    async def writer() -> None:
        for version in range(2, windows + 1):
            args = [version, *_flat(window_scores(version))]
            await rewrite(keys=[keys.board_key(BOARD), keys.meta_key(BOARD)], args=args)
            await asyncio.sleep(0)

    def check(body: dict[str, Any], player: str | None = None, contiguous: bool = True) -> None:
        version = body["as_of"]
        seen.add(version)
        ref = reference_ranking(window_scores(version))
        assert body["total"] == len(ref)
        got = [(e["rank"], e["player"], e["score"]) for e in body["entries"]]
        position = {p: i for i, (_, p, _) in enumerate(ref)}
        assert all(ref[position[p]] == (rank, p, s) for rank, p, s in got)
        ranks = [rank for rank, _, _ in got]
        assert ranks == sorted(ranks)
        if contiguous and got:
            first = position[got[0][1]]
            assert got == ref[first : first + len(got)]
        if player is not None:
            assert player in {p for _, p, _ in got}

    async def reader(n: int) -> None:
        rng = random.Random(n)
        for _ in range(150):
            kind = rng.randrange(3)
            if kind == 0:
                check(await get_json(client, path(BOARD, "top"), limit=rng.choice((10, 100)), offset=rng.randrange(40)))
            elif kind == 1:
                player = f"p{rng.randrange(30)}"
                check(await get_json(client, path(BOARD, "players", player, "around"), radius=7), player)
            else:
                body = await get_json(client, path(BOARD, "players"), ids="p1,p5,p29,p200")
                check(body, contiguous=False)
                assert "p200" in body["missing"] or len(window_scores(body["as_of"])) > 200

    try:
        async with asyncio.timeout(120):
            await asyncio.gather(writer(), *(reader(n) for n in range(8)))
    finally:
        await writer_redis.aclose()
    assert len(seen) > 10, "readers and writer did not overlap"


def _flat(scores: dict[str, int]) -> list[str | int]:
    return [x for player, score in scores.items() for x in (player, score)]


async def test_real_uvicorn_server(redis_url: str, redis_client: Redis, tmp_path: Path) -> None:
    scores = {p: i for i, p in enumerate(ODD_IDS)}
    await load_board(redis_client, BOARD, scores)
    ref = reference_ranking(scores)
    with api_process(redis_url, tmp_path) as base:
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:
            for rank, player, score in ref:
                body = await get_json(http, path(BOARD, "players", player))
                assert (body["player"], body["rank"], body["score"]) == (player, rank, score)
            assert (await get_json(http, path(BOARD, "top")))["entries"] == entries(ref)
            assert (await http.get("/readyz")).status_code == 200
            assert (await http.get("/openapi.json")).json()["info"]["title"] == "hotboard read API"
            docs = await http.get("/docs")  # Swagger UI from the installed docs extra, no CDN
            assert docs.status_code == 200 and "/openapi.json" in docs.text and "https://" not in docs.text
            for asset in ("/docs/swagger-ui.css", "/docs/swagger-ui-bundle.js"):
                assert (await http.get(asset)).status_code == 200
            assert (await http.get("/docs/index.html")).status_code == 404
            response = await http.get(path(BOARD, "players", "nobody"))
            assert response.status_code == 404 and "traceback" not in response.text.lower()


async def test_every_read_survives_a_script_flush(client: httpx.AsyncClient, redis_client: Redis) -> None:
    """As after a Redis restart: EVALSHA answers NOSCRIPT, the script is loaded and the call sent once more."""
    await load_board(redis_client, "g", {"a": 2, "b": 1})
    urls = [path("g", "top"), path("g", "players", "a"), path("g", "players", "a", "around"), path("g", "players")]
    for url in urls:
        await redis_client.script_flush()
        assert (await client.get(url, params={"ids": "a,b"} if url.endswith("players") else None)).status_code == 200
