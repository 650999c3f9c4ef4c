"""The hot questions on plain requests, answered without Starlette's routing and middleware stack.

A py-spy profile of ``hotboard api`` under load put request/response objects, routing and the middleware
chain at about a third of the CPU of a rank request. Rank, around-me and top pages are most of the traffic,
so for them (the entries of :data:`reader_api.routes.ENDPOINTS` with a ``fast`` question) this front door
parses the path and query itself and asks the very function the full app's handler asks, so it writes the
same bytes. A request it does not fully understand — another route, a percent-encoded path,
a query with escapes, repeats or unknown keys — is handed unchanged to the full app. Once it has asked Redis,
it answers whatever happens itself (404, 422, 503, 500 through the same functions as the full app's handlers,
each counted): handing a failed request over would ask a struggling Redis twice and double the time to the
503. It must stay the outermost middleware (see :func:`reader_api.app.create_app`): it reads the raw path
before any rewrite, and it counts its own answers because the metrics middleware never sees them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from operator import itemgetter

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reader_api.errors import JSON, REDIS_FAILURES, ApiError, api_failure, internal_failure, redis_failure
from reader_api.metrics import ApiMetrics
from reader_api.routes import ENDPOINTS

_ASK = {e.path: e.fast for e in ENDPOINTS if e.fast is not None}
#: Query parameters each fast route understands; any other key sends the request to the full app.
QUERY_KEYS = {e.path: frozenset(e.query) for e in ENDPOINTS if e.fast is not None}
#: On every response (this middleware adds it to the full app's too): a browser must never sniff a JSON body
#: that echoes client input into HTML.
NOSNIFF = (b"x-content-type-options", b"nosniff")
_HEADERS = [(b"content-type", JSON.encode()), NOSNIFF]
#: A route template as (template, literal segments' getter, their text, [(index, parameter name)]).
Shape = tuple[str, Callable[[list[str]], tuple[str, ...]], tuple[str, ...], list[tuple[int, str]]]


def _shapes(templates: list[str]) -> dict[int, list[Shape]]:
    """segment count -> the shapes of the templates with that many segments."""
    shapes: dict[int, list[Shape]] = {}
    for template in templates:
        parts = template.split("/")
        literals = [i for i, part in enumerate(parts) if not part.startswith("{")]
        params = [(i, part[1:-1]) for i, part in enumerate(parts) if part.startswith("{")]
        assert len(literals) > 1, template  # so the getter answers a tuple: "" before the first "/", and more
        getter = itemgetter(*literals)
        shapes.setdefault(len(parts), []).append((template, getter, getter(parts), params))
    return shapes


_SHAPES = _shapes(list(_ASK))


def match(path: str) -> tuple[str, dict[str, str]] | None:
    """``/v1/boards/g/players/p/around`` -> (AROUND, {"board": "g", "player": "p"}); None for anything else.
    A parameter is one non-empty segment, as in Starlette's ``{name}``."""
    parts = path.split("/")
    for template, literals, expected, params in _SHAPES.get(len(parts), ()):
        if literals(parts) == expected:
            found = {name: parts[i] for i, name in params}
            return (template, found) if all(found.values()) else None
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


def _nosniff(send: Send) -> Send:
    async def send_nosniff(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), NOSNIFF]}
        await send(message)

    return send_nosniff


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
                    answer.raw_headers.append(NOSNIFF)
                    await answer(scope, receive, send)
                    self.metrics.observe(found[0], "GET", answer.status_code, time.perf_counter() - started)
                    return
        await self.app(scope, receive, _nosniff(send) if scope["type"] == "http" else send)

    async def _answer(self, scope: Scope, route: str, params: dict[str, str]) -> bytes | Response | None:
        """The body of a 200, an error response, or None: the full app must answer."""
        query = simple_query(scope["query_string"], QUERY_KEYS[route])
        if query is None:
            return None
        try:
            return await _ASK[route](scope["app"].state.reader, params, query)
        except ApiError as exc:
            return api_failure(exc, self.retry_after_s)
        except REDIS_FAILURES as exc:
            return redis_failure(exc, self.retry_after_s)
        except Exception:  # noqa: BLE001 - as the app's last handler: logged there, a counted JSON 500
            return internal_failure(scope["path"])
