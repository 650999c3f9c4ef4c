"""HTTP endpoints as plain Starlette routes: parse and validate (:mod:`reader_api.params`), delegate to
:class:`~reader_api.service.Reader`, return the already-encoded JSON. The contract is in
:mod:`reader_api.openapi`."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reader_api import docs
from reader_api.errors import JSON
from reader_api.params import check_board, check_player, ids_param, int_param
from reader_api.service import Reader


def _reader(request: Request) -> Reader:
    reader: Reader = request.app.state.reader
    return reader


def _json(body: bytes) -> Response:
    return Response(body, media_type=JSON)


async def top(request: Request) -> Response:
    board = check_board(request.path_params["board"])
    query = request.query_params
    return _json(await _reader(request).top(board, int_param(query, "offset"), int_param(query, "limit")))


async def player(request: Request) -> Response:
    board = check_board(request.path_params["board"])
    name = check_player(request.path_params["player"])
    return _json(await _reader(request).player(board, name))


async def around(request: Request) -> Response:
    board = check_board(request.path_params["board"])
    name = check_player(request.path_params["player"])
    return _json(await _reader(request).around(board, name, int_param(request.query_params, "radius")))


async def players(request: Request) -> Response:
    board = check_board(request.path_params["board"])
    return _json(await _reader(request).players(board, ids_param(request.query_params)))


async def healthz(request: Request) -> Response:
    return _json(b'{"status":"ok"}')


async def readyz(request: Request) -> Response:
    if not await _reader(request).ready():
        raise RedisError("PING was not answered with PONG")  # the 503 handler adds the configured Retry-After
    return _json(b'{"status":"ready"}')


async def metrics(request: Request) -> Response:
    return Response(generate_latest(_reader(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    body: bytes = request.app.state.openapi
    return _json(body)


ROUTES = [
    Route("/v1/boards/{board}/top", top, methods=["GET"]),
    Route("/v1/boards/{board}/players/{player}/around", around, methods=["GET"]),
    Route("/v1/boards/{board}/players/{player}", player, methods=["GET"]),
    Route("/v1/boards/{board}/players", players, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/docs", docs.page, methods=["GET"]),
    Route("/docs/{asset}", docs.asset, methods=["GET"]),
]
