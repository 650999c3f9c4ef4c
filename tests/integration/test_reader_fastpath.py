"""Fast path and full app give the same answers: each request is asked once plainly (fast path) and once
with a harmless percent-escape (which the fast path hands to the full app)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from hotboard import keys
from reader_api.app import create_app
from reader_api.paths import EncodedSlashMiddleware
from reader_api.reader import Reader
from reader_api.routes import PLAYER
from reader_api.settings import ApiSettings
from tests.integration.reader_harness import asgi_client, metrics_text

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(ApiSettings(redis=redis_url))) as c:
        yield c


@pytest.mark.parametrize(
    ("plain", "escaped"),
    [
        ("/v1/boards/g/top?limit=3&offset=1", "/v1/boards/%67/top?limit=3&offset=1"),
        ("/v1/boards/g/top", "/v1/boards/g/top?limit=%3100"),
        ("/v1/boards/g/players/p-7", "/v1/boards/g/players/p%2D7"),
        ("/v1/boards/g/players/p-7/around?radius=2", "/v1/boards/g/players/p%2D7/around?radius=2"),
        ("/v1/boards/g/players/nobody", "/v1/boards/g/players/nob%6Fdy"),
        ("/v1/boards/g/top?limit=0", "/v1/boards/g/top?limit=%30"),
        ("/v1/boards/none/top", "/v1/boards/n%6Fne/top"),
        ("/v1/boards/g/players/p-7/around?radius=101", "/v1/boards/g/players/p%2D7/around?radius=101"),
        # An empty segment is no parameter: 404 from both (the fast path once answered these 422).
        ("/v1/boards/g/players/", "/v1/boards/%67/players/"),
        ("/v1/boards//top", "/v1/boards//top?limit=%31"),
    ],
)
async def test_both_paths_answer_alike(
    client: httpx.AsyncClient, redis_client: Redis, plain: str, escaped: str
) -> None:
    await redis_client.zadd(keys.board_key("g"), {f"p-{i}": i * 10 for i in range(20)})
    await redis_client.hset(keys.meta_key("g"), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1_700_000_000_000})
    fast, full = await client.get(plain), await client.get(escaped)
    assert (fast.status_code, fast.json()) == (full.status_code, full.json())
    assert fast.headers["content-type"] == full.headers["content-type"]


async def test_fast_answers_are_counted_by_route_template(client: httpx.AsyncClient, redis_client: Redis) -> None:
    await redis_client.zadd(keys.board_key("g"), {"a": 1})
    assert (await client.get("/v1/boards/g/players/a")).status_code == 200
    body = metrics_text(client)
    assert (
        'hotboard_api_requests_total{method="GET",route="/v1/boards/{board}/players/{player}",status="200"} 1.0' in body
    )


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        (OSError("connection reset"), 503, "redis_unavailable"),
        (RedisError("boom"), 503, "redis_error"),
        (RuntimeError("bug"), 500, "internal_error"),
    ],
)
async def test_a_failing_request_is_answered_once_like_the_app_and_counted(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, fault: Exception, status: int, code: str
) -> None:
    calls: list[str] = []

    async def failing(self: Reader, board: str, player: str) -> bytes:
        calls.append(player)
        raise fault

    monkeypatch.setattr(Reader, "player", failing)
    async with asgi_client(create_app(ApiSettings(redis=redis_url)), raise_app_exceptions=False) as client:
        fast, full = await client.get("/v1/boards/g/players/p-7"), await client.get("/v1/boards/g/players/p%2D7")
        assert (fast.status_code, fast.json()["error"]) == (full.status_code, full.json()["error"]) == (status, code)
        assert fast.headers.get("retry-after") == full.headers.get("retry-after")
        assert calls == ["p-7", "p-7"]  # once per request: the fast path never hands a failed request over
        body = metrics_text(client)
    sample = f'hotboard_api_requests_total{{method="GET",route="{PLAYER}",status="{status}"}} 2.0'
    assert sample in body


async def test_the_fast_path_stays_outermost(redis_url: str) -> None:
    app = create_app(ApiSettings(redis=redis_url))
    app.add_middleware(EncodedSlashMiddleware)  # inserted in front of the fast path
    with pytest.raises(RuntimeError, match="outermost"):
        async with asgi_client(app):
            pass
