"""An endpoint as the route table declares it: its path, handler and how the OpenAPI document shows it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from reader_api.errors import JSON
from reader_api.reader import Reader

#: (reader, path parameters, query) -> the body of a 200; a failure raises (ApiError, RedisError, ...).
Ask = Callable[[Reader, Mapping[str, str], Mapping[str, str]], Awaitable[bytes]]
Handler = Callable[[Request], Awaitable[Response]]

SNAPSHOT = "Answer from one consistent snapshot"
#: status -> what it means; every 503 carries Retry-After.
READ_ERRORS = (
    (
        404,
        "Unknown board or player, or a period not kept or not started (period_not_found; the "
        "message names the kept periods that exist)",
    ),
    (422, "Invalid parameter, named in `parameter`"),
    (
        503,
        "Redis unreachable, or the board's stored meta is corrupt (the message names the key); retry "
        "after Retry-After seconds",
    ),
)


@dataclass(frozen=True, slots=True)
class Doc:
    """How an endpoint appears in the OpenAPI document."""

    operation: str
    summary: str
    answer: type  # its 200 body, a type of reader_api.answers
    answered: str = SNAPSHOT
    tag: str = "leaderboard"
    errors: tuple[tuple[int, str], ...] = READ_ERRORS
    #: Other successful answers: (status, answer type, when).
    also: tuple[tuple[int, type, str], ...] = ()
    #: The OpenAPI requestBody object of a write.
    request: Mapping[str, Any] | None = None
    #: The media type of the 200 body: JSON of ``answer``, or a stream of events each holding one.
    media: str = JSON


@dataclass(frozen=True, slots=True)
class Endpoint:
    path: str
    handler: Handler
    doc: Doc | None = None  # None: not part of the documented contract
    #: The query keys the endpoint reads, in the document's order; the fast path hands any other to the app.
    query: tuple[str, ...] = ()
    #: Set for a read question that the fast path answers too (plain requests only; see reader_api.fastpath).
    fast: Ask | None = None
    method: str = "GET"
    #: Served only when the API writes (``--kafka``): needs a bearer token.
    write: bool = False

    @property
    def params(self) -> list[str]:
        """The path parameters, in order: ``/v1/boards/{board}/top`` -> ``["board"]``."""
        return re.findall(r"{(\w+)}", self.path)
