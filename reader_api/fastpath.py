"""The hot questions on plain requests, answered without Starlette's routing and middleware stack.

A py-spy profile of ``hotboard api`` under load put request/response objects, routing and the middleware
chain at about a third of the CPU of a rank request. Rank, around-me and top pages are most of the traffic,
so for them this front door parses the path and query itself, asks the same :class:`~reader_api.service.Reader`
and writes the same bytes. A request it does not fully understand — another route, a percent-encoded path,
a query with escapes, repeats or unknown keys — is handed unchanged to the full app. Once it has asked Redis,
it answers whatever happens itself (404, 422, 503, 500 through the same functions as the full app's handlers,
each counted): handing a failed request over would ask a struggling Redis twice and double the time to the
503. It must stay the outermost middleware (see :func:`reader_api.app.create_app`): it reads the raw path
before any rewrite, and it counts its own answers because the metrics middleware never sees them.
"""

from __future__ import annotations

import time

from redis.exceptions import RedisError
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from reader_api.errors import JSON, ApiError, api_failure, internal_failure, redis_failure
from reader_api.metrics import ApiMetrics
from reader_api.params import check_board, check_player, int_param
from reader_api.service import Reader

TOP = "/v1/boards/{board}/top"
PLAYER = "/v1/boards/{board}/players/{player}"
AROUND = "/v1/boards/{board}/players/{player}/around"
#: Query parameters each fast route understands; any other key sends the request to the full app.
QUERY_KEYS = {TOP: frozenset({"limit", "offset"}), PLAYER: frozenset(), AROUND: frozenset({"radius"})}
_HEADERS = [(b"content-type", JSON.encode())]


def match(path: str) -> tuple[str, list[str]] | None:
    """``/v1/boards/g/players/p/around`` -> (AROUND, ["g", "p"]); None for anything else."""
    parts = path.split("/")
    n = len(parts)
    if n < 5 or parts[1] != "v1" or parts[2] != "boards":
        return None
    if n == 5 and parts[4] == "top":
        return TOP, [parts[3]]
    if n == 6 and parts[4] == "players":
        return PLAYER, [parts[3], parts[5]]
    if n == 7 and parts[4] == "players" and parts[6] == "around":
        return AROUND, [parts[3], parts[5]]
    return None


def simple_query(raw: bytes, allowed: frozenset[str]) -> dict[str, str] | None:
    """``limit=10&offset=0`` -> dict; None when the query needs the general parser (escapes, repeats,
    unknown or blank keys), so both paths always read a query the same way."""
    if not raw:
        return {}
    if b"%" in raw or b"+" in raw or b";" in raw:
        return None
    query: dict[str, str] = {}
    for pair in raw.decode("ascii", "replace").split("&"):
        key, sep, value = pair.partition("=")
        if not sep or key not in allowed or key in query:
            return None
        query[key] = value
    return query


class FastPath:
    def __init__(self, app: ASGIApp, metrics: ApiMetrics, retry_after_s: int) -> None:
        self.app = app
        self.metrics = metrics
        self.retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and b"%" not in scope.get("raw_path", b"%"):
            found = match(scope["path"])
            if found is not None:
                started = time.perf_counter()
                answer = await self._answer(scope, *found)
                if isinstance(answer, bytes):
                    headers = [*_HEADERS, (b"content-length", str(len(answer)).encode())]
                    await send({"type": "http.response.start", "status": 200, "headers": headers})
                    await send({"type": "http.response.body", "body": answer})
                    self.metrics.observe(found[0], "GET", 200, time.perf_counter() - started)
                    return
                if answer is not None:
                    await answer(scope, receive, send)
                    self.metrics.observe(found[0], "GET", answer.status_code, time.perf_counter() - started)
                    return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, route: str, params: list[str]) -> bytes | Response | None:
        """The body of a 200, an error response, or None: the full app must answer."""
        query = simple_query(scope["query_string"], QUERY_KEYS[route])
        if query is None:
            return None
        reader: Reader = scope["app"].state.reader
        try:
            board = check_board(params[0])
            if route == TOP:
                return await reader.top(board, int_param(query, "offset"), int_param(query, "limit"))
            player = check_player(params[1])
            if route == PLAYER:
                return await reader.player(board, player)
            return await reader.around(board, player, int_param(query, "radius"))
        except ApiError as exc:
            return api_failure(exc, self.retry_after_s)
        except (RedisError, OSError) as exc:
            return redis_failure(exc, self.retry_after_s)
        except Exception:  # noqa: BLE001 - as the app's last handler: logged there, a counted JSON 500
            return internal_failure(scope["path"])
