"""uvicorn's httptools protocol with the bounds a public API needs: pipelining, request-head size, head timeout,
and a JSON 503 past the connection cap.

Why a subclass rather than stock httptools or h11 (measured in docs/api.md, "Limits (hostile clients)"):

* Stock httptools hands the parser every chunk the socket gives (up to 256 KiB) in one ``feed_data`` call;
  every pipelined request in it becomes a queued request cycle at once, and pausing the transport only stops
  the *next* read. 8 MiB of pipelined GETs held about 400 MiB. Here input is fed in slices of
  :data:`FEED_SLICE` bytes, and feeding stops while a request waits behind the one in flight: the rest
  stays in one buffer (at most one read) with reading paused, so a connection holds a small constant.
* httptools concatenates a header value fragment by fragment (quadratic) and has no size limits. The bytes
  fed while a head is incomplete are counted per slice, so an oversized request line (414) or header block
  (431) is refused after at most one extra slice, before it is buffered.
* uvicorn times out idle keep-alive connections, but never a connection that has not sent a request yet or
  trickles one: a head must be complete within ``head_timeout_s`` (else 408, or a silent close when idle).
* h11 bounds the first two but answers 400 for both and costs CPU per request in pure Python.
* uvicorn's connection cap counts connections that never sent a byte, so a flood of them locked every request
  out: here the cap sheds idle connections first (:mod:`reader_api.shedding`), and the probes are always
  answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
import orjson
from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from reader_api.answers import ErrorBody
from reader_api.fastpath import NOSNIFF
from reader_api.shedding import Idle, Shedder

#: Bytes handed to the parser at once. Small enough that the requests one slice can hold (at least 18 bytes
#: each) are a few hundred cycles at most; large enough that a normal request is one slice.
FEED_SLICE = 4096
#: Answered whatever the load: a liveness probe refused under a connection flood restarts a healthy pod.
PROBES = frozenset({"/healthz", "/readyz"})


@dataclass(frozen=True, slots=True)
class Limits:
    max_request_line_bytes: int
    max_header_bytes: int
    max_headers: int
    head_timeout_s: float
    retry_after_s: int


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; ``status`` is the answer."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


_REASONS = {
    400: (b"Bad Request", "bad_request", "invalid HTTP request"),
    408: (b"Request Timeout", "request_timeout", "the request head did not arrive in time"),
    414: (b"URI Too Long", "request_line_too_long", "the request line is too long"),
    431: (b"Request Header Fields Too Large", "headers_too_large", "too many or too large request headers"),
}


def refusal(status: int) -> bytes:
    """A complete ``Connection: close`` response with the API's JSON error body."""
    reason, code, message = _REASONS[status]
    error: ErrorBody = {"error": code, "message": message}
    body = orjson.dumps(error)
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s: %s\r\nconnection: close\r\n"
    return head % (status, reason, len(body), *NOSNIFF) + b"\r\n" + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """Set :attr:`limits` on a subclass (see :func:`protocol_class`); uvicorn builds one per connection."""

    limits: ClassVar[Limits]
    shedder: ClassVar[Shedder[BoundedHttpToolsProtocol]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn counts the new connection in ``limit_concurrency``; the cap is decided here, not by uvicorn
        self._cap = None if self.limit_concurrency is None else self.limit_concurrency - 1
        self.limit_concurrency = None
        self._pending = memoryview(b"")
        self._in_head = False
        self._head_bytes = 0
        self._header_count = 0
        self._head_timer: asyncio.TimerHandle | None = None

    # -- connection lifecycle ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.shedder.mark(self, Idle.SILENT)
        self._arm_head_timer()
        while self._over_cap() and self.shedder.shed_one(keep=self):
            pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.shedder.forget(self)
        self._cancel_head_timer()
        self._pending = memoryview(b"")
        super().connection_lost(exc)

    def shed(self) -> None:
        """Closed to make room under the connection cap (idle: no request in flight)."""
        self._cancel_head_timer()
        self._pending = memoryview(b"")
        self.transport.close()

    def _over_cap(self) -> bool:
        """More connections open (not counting those shed and closing) than the cap allows."""
        return self._cap is not None and len(self.connections) - len(self.shedder.shedding) > self._cap

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._in_head or self._pending:
            self._refuse(408)
        else:
            self.transport.close()

    def _refuse(self, status: int) -> None:
        self._pending = memoryview(b"")
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(refusal(status))
            self.transport.close()

    # -- input: fed in slices, stopped while a pipelined request waits --------------------------------------

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self.shedder.tier(self) is not Idle.PARTIAL:
            self.shedder.mark(self, None)  # silent or resting no more; a new head marks it partial
        self._pending = memoryview(bytes(self._pending) + data if self._pending else data)
        self._feed()

    def _feed(self) -> None:
        while self._pending and not self.pipeline and not self.transport.is_closing():
            piece, self._pending = self._pending[:FEED_SLICE], self._pending[FEED_SLICE:]
            if self._in_head:
                self._head_bytes += len(piece)
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade:
                self._pending = memoryview(b"")  # no upgrades here: the rest of the stream is not HTTP/1.1
                return
            except httptools.HttpParserError as exc:
                # httptools wraps the exception a callback raised; its __context__ is ours
                cause = exc.__context__
                if isinstance(cause, _Refused):
                    self._refuse(cause.status)
                else:
                    self._refuse(400)
                return
            if self._in_head and self._head_bytes - len(self.url) > self.limits.max_header_bytes:
                self._refuse(431)
                return
        if self._pending:
            self.flow.pause_reading()

    def send_400_response(self, msg: str) -> None:
        self._refuse(400)  # the API's JSON error body and headers, not uvicorn's plain text

    def on_response_complete(self) -> None:
        super().on_response_complete()  # resumes reading and starts the next queued request, if any
        if self.transport.is_closing():
            return
        if not self.pipeline and (self.cycle is None or self.cycle.response_complete):
            self.shedder.mark(self, Idle.RESTING)  # nothing in flight; pending input parsed next marks it partial
        if not self.pipeline:
            self._arm_head_timer()
        self._feed()

    # -- parser callbacks: count, refuse early --------------------------------------------------------------

    def on_message_begin(self) -> None:
        idle = self.cycle is None or self.cycle.response_complete  # else it is pipelined behind one in flight
        super().on_message_begin()
        if idle:
            self.shedder.mark(self, Idle.PARTIAL)
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        if self._head_timer is None:
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > self.limits.max_request_line_bytes:
            raise _Refused(414)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Refused(431)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.shedder.mark(self, None)
        self._in_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if app is service_unavailable or (cycle.scope["path"] not in PROBES and not self._admit()):
            app = self._overloaded
        super()._start_asgi_task(cycle, app)

    def _admit(self) -> bool:
        """Room for a request: under the cap once an idle connection is shed, and requests in flight under it."""
        while self._over_cap() and self.shedder.shed_one(keep=self):
            pass
        return self._cap is None or (not self._over_cap() and len(self.tasks) <= self._cap)

    async def _overloaded(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        """uvicorn's ``limit_concurrency`` answer, as the API's JSON 503 with Retry-After."""
        error: ErrorBody = {"error": "overloaded", "message": "too many connections; retry later"}
        body = orjson.dumps(error)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            NOSNIFF,
            (b"retry-after", str(self.limits.retry_after_s).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def protocol_class(limits: Limits) -> type[BoundedHttpToolsProtocol]:
    """One class per server: its connections share the one :class:`Shedder`."""
    return type("HotboardHttpProtocol", (BoundedHttpToolsProtocol,), {"limits": limits, "shedder": Shedder()})
