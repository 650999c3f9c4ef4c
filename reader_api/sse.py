"""Server-Sent Events of the top of a board and of a player's neighbourhood (``text/event-stream``).

Each event's ``data`` is the JSON the non-streaming endpoint answers and its ``id`` the board version it was
read at; an event is sent only when the answer changed. A client resuming with ``Last-Event-ID`` of the
version it holds gets no first event until the answer changes. Comment lines keep an idle stream open
through proxies; a stream ends after ``api_stream_max_s`` (EventSource reconnects on its own, with
``Last-Event-ID``). Per board one watcher reads for all its streams (:mod:`reader_api.streams`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from reader_api import answers as a
from reader_api import snapshot
from reader_api.endpoint import READ_ERRORS, Doc, Endpoint
from reader_api.params import check_board, check_player, int_param, period_param
from reader_api.reader import Reader
from reader_api.seasons import Target
from reader_api.snapshot import Header
from reader_api.streams import Answer, Question, Streams, Subscription

log = logging.getLogger("hotboard.api")

EVENT_STREAM = "text/event-stream"
HEARTBEAT = b": heartbeat\n\n"
#: How long EventSource waits before it reconnects (ms), sent once at the start.
RETRY_MS = 2000


def event(answer: Answer) -> bytes:
    """One event: ``id`` the board version (none before the first flush), ``event: error`` for an error body."""
    head = b"event: error\n" if answer.error else b"" if answer.version is None else b"id: %d\n" % answer.version
    return head + b"data: " + answer.body + b"\n\n"


class EventStream(Response):
    """The stream of one subscription until the client leaves, a send times out (dropped) or the stream's time is
    up. Never buffers more than the subscription's one pending answer and the socket's own buffers."""

    media_type = EVENT_STREAM

    def __init__(self, streams: Streams, question: Question, subscription: Subscription, first: Answer | None) -> None:
        # not Response.__init__: it would declare a content-length
        self.status_code, self.background = 200, None
        self.raw_headers = [
            (b"content-type", EVENT_STREAM.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        self.streams, self.question, self.subscription, self.first = streams, question, subscription, first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        subscription, settings = self.subscription, self.streams.settings
        watcher = asyncio.create_task(self._watch(receive))
        dropped = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            opening = b"retry: %d\n\n" % RETRY_MS + (b"" if self.first is None else event(self.first))
            dropped = not await self._send(send, opening, settings.api_stream_send_timeout_s)
            async with asyncio.timeout(settings.api_stream_max_s):
                while not (subscription.gone or dropped):
                    chunk = HEARTBEAT
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(settings.api_stream_heartbeat_s):
                            await subscription.ready.wait()
                        answer = subscription.take()
                        if answer is None:
                            continue  # woken by leave()
                        chunk = event(answer)
                        self.streams.metrics.events.inc()
                    dropped = not await self._send(send, chunk, settings.api_stream_send_timeout_s)
        except TimeoutError:  # the stream's time is up: end it cleanly
            pass
        finally:
            watcher.cancel()
            self.streams.unsubscribe(self.question, subscription)
        if not (subscription.gone or dropped):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send(self, send: Send, chunk: bytes, timeout_s: float) -> bool:
        """False when the client did not take ``chunk`` in time: the stream is dropped (the server closes the
        connection), so a client that stops reading holds one answer and its socket buffers, no more."""
        message: Message = {"type": "http.response.body", "body": chunk, "more_body": True}
        try:
            async with asyncio.timeout(timeout_s):
                await send(message)
        except TimeoutError:
            self.streams.metrics.dropped.inc()
            log.warning("event stream dropped: its client did not read for %.1f s", timeout_s)
            return False
        return True

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.subscription.leave()


def _resumed(request: Request, answer: Answer) -> bool:
    """The client already holds this answer: its ``Last-Event-ID`` is the version the answer was read at."""
    last = request.headers.get("last-event-id", "")
    return not answer.error and answer.version is not None and last == str(answer.version)


async def _stream(request: Request, question: Question) -> Response:
    streams: Streams = request.app.state.streams
    subscription, first = await streams.subscribe(question)
    return EventStream(streams, question, subscription, None if _resumed(request, first) else first)


def _reader(request: Request) -> Reader:
    reader: Reader = request.app.state.reader
    return reader


async def _target(request: Request) -> Target:
    reader = _reader(request)
    return await reader.target(check_board(request.path_params["board"]), period_param(request.query_params))


async def top_stream(request: Request) -> Response:
    reader, limit = _reader(request), int_param(request.query_params, "limit")
    target = await _target(request)

    async def answer(reply: Any) -> Answer:
        async def parsed(name: str) -> tuple[Header, a.TopPage]:
            return snapshot.top(name, reply)

        header, page = await reader.read(target, parsed)
        return Answer(header.version, orjson.dumps(page))

    call = snapshot.top_call(target.name, 0, limit)
    return await _stream(request, Question(("top", target.name, limit), target.name, call, answer))


async def around_stream(request: Request) -> Response:
    reader, radius = _reader(request), int_param(request.query_params, "radius")
    name = check_player(request.path_params["player"])
    target = await _target(request)

    async def answer(reply: Any) -> Answer:
        async def parsed(board: str) -> tuple[Header, a.Neighbourhood]:
            return snapshot.around_at(board, name, reply)

        header, found = await reader.read(target, parsed)
        return Answer(header.version, orjson.dumps(found))

    call = snapshot.around_call(target.name, name, radius)
    return await _stream(request, Question(("around", target.name, name, radius), target.name, call, answer))


STREAMED = "One event per applied window that changed the answer; `id` is the board version"
_REFUSED = (503, "Redis unreachable, or this process holds its cap of streams (Retry-After)")
STREAM_ERRORS = (*READ_ERRORS[:2], _REFUSED)
STREAM_ENDPOINTS = (
    Endpoint(
        "/v1/boards/{board}/top/stream",
        top_stream,
        Doc("top_stream", "The top of the board, live", a.TopPage, STREAMED, errors=STREAM_ERRORS, media=EVENT_STREAM),
        query=("limit", "period"),
    ),
    Endpoint(
        "/v1/boards/{board}/players/{player}/around/stream",
        around_stream,
        Doc(
            "around_stream",
            "A player's neighbourhood, live",
            a.Neighbourhood,
            STREAMED,
            errors=STREAM_ERRORS,
            media=EVENT_STREAM,
        ),
        query=("radius", "period"),
    ),
)
