"""Every way reading Redis can fail is a 503 with ``Retry-After``, never a 500: redis-py's cluster client raises
its own ``RedisClusterException`` (not a ``RedisError``) when no node answers or ``CLUSTER SLOTS`` is refused."""

from __future__ import annotations

import httpx
import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from reader_api.errors import REDIS_FAILURES, handlers


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (RedisClusterException("Cluster mode is not enabled on this node"), "redis_error"),
        (RedisConnectionError("refused"), "redis_unavailable"),
        (ResponseError("NOPERM this user has no permissions"), "redis_error"),
        (OSError("reset"), "redis_unavailable"),
    ],
)
async def test_a_redis_failure_of_any_kind_is_a_503_with_retry_after(exc: Exception, code: str) -> None:
    assert isinstance(exc, REDIS_FAILURES)

    async def fail(request: Request) -> None:
        raise exc

    app = Starlette(routes=[Route("/x", fail)], exception_handlers=handlers(3))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hotboard.test") as client:
        r = await client.get("/x")
    assert (r.status_code, r.headers.get("retry-after"), orjson.loads(r.content)["error"]) == (503, "3", code)
