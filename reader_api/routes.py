"""The route table: every endpoint written once. Starlette's routing (:data:`ROUTES`), the fast path
(:mod:`reader_api.fastpath`) and the OpenAPI document (:mod:`reader_api.openapi`) are all built from
:data:`ENDPOINTS`. A read question parses and validates (:mod:`reader_api.params`), asks the
:class:`~reader_api.reader.Reader` and returns the already-encoded JSON."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reader_api import answers as a
from reader_api import consistency, docs, live_page, sse, write_bodies, writes
from reader_api.endpoint import READ_ERRORS, Ask, Doc, Endpoint
from reader_api.errors import JSON
from reader_api.params import after_param, check_board, check_player, ids_param, int_param, period_param
from reader_api.reader import Reader
from reader_api.seasons import Target


def _reader(request: Request) -> Reader:
    reader: Reader = request.app.state.reader
    return reader


def _json(body: bytes) -> Response:
    return Response(body, media_type=JSON)


def question(
    path: str, ask: Ask, doc: Doc, query: tuple[str, ...] = (), fast: bool = True, after: bool = True
) -> Endpoint:
    """A read endpoint: the full app's handler and (``fast``) the fast path ask the same function. A board read
    (its path names the board; ``after``) also takes ``after`` and ``wait_ms``: read your writes."""
    if after and "{board}" in path:
        ask, query = consistent(ask), (*query, *consistency.QUERY)

    async def handler(request: Request) -> Response:
        return _json(await ask(_reader(request), request.path_params, request.query_params))

    return Endpoint(path, handler, doc, query, ask if fast else None)


async def _target(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> Target:
    """The board or period board asked about; parameters are checked before Redis is asked anything."""
    return await reader.target(check_board(path["board"]), period_param(query))


def consistent(ask: Ask) -> Ask:
    """``ask`` once the board (the period board asked about) covers the ``after`` token; at once without one."""

    async def asked(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
        if "after" in query:
            await consistency.wait_after(reader, (await _target(reader, path, query)).name, query)
        return await ask(reader, path, query)

    return asked


async def top(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    offset, limit = int_param(query, "offset"), int_param(query, "limit")
    return await reader.top(await _target(reader, path, query), offset, limit)


async def player(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    name = check_player(path["player"])
    return await reader.player(await _target(reader, path, query), name)


async def around(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    name, radius = check_player(path["player"]), int_param(query, "radius")
    return await reader.around(await _target(reader, path, query), name, radius)


async def players(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    ids = ids_param(query)
    return await reader.players(await _target(reader, path, query), ids)


async def boards(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    return await reader.boards(after_param(query), int_param(query, "limit"))


async def board(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    return await reader.board(await _target(reader, path, query))


async def periods(reader: Reader, path: Mapping[str, str], query: Mapping[str, str]) -> bytes:
    return await reader.periods(check_board(path["board"]))


_ALIVE, _READY = orjson.dumps(a.Health(status="ok")), orjson.dumps(a.Health(status="ready"))


async def healthz(request: Request) -> Response:
    return _json(_ALIVE)


async def readyz(request: Request) -> Response:
    if not await _reader(request).ready():
        raise RedisError("Redis did not answer a read")  # the 503 handler adds the configured Retry-After
    return _json(_READY)


async def openapi(request: Request) -> Response:
    body: bytes = request.app.state.openapi
    return _json(body)


TOP = "/v1/boards/{board}/top"
PLAYER = "/v1/boards/{board}/players/{player}"
AROUND = "/v1/boards/{board}/players/{player}/around"
PLAYERS = "/v1/boards/{board}/players"
BOARDS = "/v1/boards"
BOARD = "/v1/boards/{board}"
PERIODS = "/v1/boards/{board}/periods"

WRITE_ERRORS = (
    (400, "The body is not JSON, or not an array (an object for a score)"),
    (401, "Missing or unknown bearer token (WWW-Authenticate: Bearer)"),
    (403, "No write token is configured: writes are refused"),
    (408, "The body did not arrive in time"),
    (409, "A request with this Idempotency-Key is still running; retry after Retry-After seconds"),
    (413, "Body or event count over the limits"),
    (415, "Content type other than application/json (or application/x-ndjson for events)"),
    (422, "Invalid parameter or event (the codec's reason), or an Idempotency-Key reused for another request"),
    (429, "The token's rate limit; retry after Retry-After seconds"),
    (503, "Kafka or Redis unreachable: `outcome` says whether the write may have been produced"),
)
EVENTS = "/v1/events"
SCORES = "/v1/boards/{board}/players/{player}/scores"
WRITE_ENDPOINTS = (
    Endpoint(
        EVENTS,
        writes.post_events,
        Doc(
            "events",
            "Write up to 1,000 score events (JSON array or NDJSON)",
            a.WriteAnswer,
            "The valid events are in the topic; the invalid ones are listed and nothing else of them happened",
            "writes",
            WRITE_ERRORS,
            request=write_bodies.EVENTS_BODY,
        ),
        method="POST",
        write=True,
    ),
    Endpoint(
        SCORES,
        writes.post_score,
        Doc(
            "score",
            "Write one score event; with wait=true answer the player's rank after it",
            a.ScoreAfterWrite,
            "wait=true: the player from the first board snapshot that holds the write",
            "writes",
            WRITE_ERRORS,
            also=((202, a.ScoreAccepted, "Accepted (in the topic); with wait=true, not applied within wait_ms"),),
            request=write_bodies.SCORE_BODY,
        ),
        query=("wait", "wait_ms"),
        method="POST",
        write=True,
    ),
)

ENDPOINTS = (
    question(TOP, top, Doc("top", "Top of the board, paged", a.TopPage), query=("limit", "offset", "period")),
    question(
        AROUND,
        around,
        Doc("around", "A player and the neighbours above and below", a.Neighbourhood),
        query=("radius", "period"),
    ),
    question(PLAYER, player, Doc("player", "One player's rank and score", a.PlayerRank), query=("period",)),
    # Ids are commas and escapes more often than not: the full app's query parser reads them.
    question(
        PLAYERS,
        players,
        Doc("players", "Several players (a friends list), sorted by rank", a.FriendsList),
        query=("ids", "period"),
        fast=False,
    ),
    question(
        BOARDS,
        boards,
        Doc(
            "boards",
            "Board names with their definitions, paged by name",
            a.BoardList,
            errors=((422, READ_ERRORS[1][1]), READ_ERRORS[2]),
        ),
        query=("limit", "after"),
        fast=False,
    ),
    question(
        BOARD,
        board,
        Doc("board", "A board's definition, size and last flush", a.BoardInfo),
        query=("period",),
        fast=False,
    ),
    question(
        PERIODS,
        periods,
        Doc(
            "periods",
            "The kept periods of a board that resets, newest first",
            a.PeriodList,
            errors=((404, "Unknown board"), (422, "The board never resets (parameter `board`)"), READ_ERRORS[2]),
        ),
        fast=False,
        after=False,
    ),
    *sse.STREAM_ENDPOINTS,
    Endpoint("/healthz", healthz, Doc("healthz", "The process is alive", a.Health, "Alive", "operations", ())),
    Endpoint(
        "/readyz",
        readyz,
        Doc("readyz", "Redis answers", a.Health, "Ready", "operations", ((503, "Redis unreachable"),)),
    ),
    Endpoint("/openapi.json", openapi),
    Endpoint("/docs", docs.page),
    Endpoint("/docs/{asset}", docs.asset),
    Endpoint("/", live_page.page),
    Endpoint("/live/{asset}", live_page.asset),
)
ALL_ENDPOINTS = (*ENDPOINTS, *WRITE_ENDPOINTS)


def served(writes: bool) -> tuple[Endpoint, ...]:
    """The endpoints an app serves: the writes only when it writes."""
    return ALL_ENDPOINTS if writes else ENDPOINTS


def routes(writes: bool) -> list[Route]:
    return [Route(e.path, e.handler, methods=[e.method]) for e in served(writes)]


ROUTES = routes(False)
