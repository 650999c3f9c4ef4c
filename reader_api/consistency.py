"""Read your writes: a board read with ``?after=<token>`` answers only once the board covers the token's offsets
(its watermarks, or the topic's checkpoints for events that went elsewhere: :mod:`reader_api.waits`), bounded
by ``wait_ms``; past it a 503 with Retry-After, never an answer older than the write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reader_api import tokens
from reader_api.errors import ApiError, invalid
from reader_api.waits import Watermarks

if TYPE_CHECKING:
    from reader_api.reader import Reader
    from reader_api.write_metrics import WriteMetrics

#: The query keys every board read takes for it.
QUERY = ("after", "wait_ms")


@dataclass(frozen=True, slots=True)
class AfterWaits:
    watermarks: Watermarks
    default_ms: int
    max_ms: int
    metrics: WriteMetrics | None = None


def wait_ms_param(query: Mapping[str, str], default_ms: int, max_ms: int) -> int:
    raw = query.get("wait_ms")
    if raw is None:
        return default_ms
    if not raw.isdigit() or len(raw) > 9 or int(raw) > max_ms:
        raise invalid("wait_ms", f"must be an integer from 0 to {max_ms}")
    return int(raw)


async def wait_after(reader: Reader, board: str, query: Mapping[str, str]) -> None:
    waits = reader.after
    if waits is None:
        raise invalid("after", "this API does not wait for writes")
    marks = tokens.decode(query["after"])
    wait_ms = wait_ms_param(query, waits.default_ms, waits.max_ms)
    covered = await waits.watermarks.wait(board, marks, wait_ms / 1000)
    if waits.metrics is not None:
        waits.metrics.waits.labels("after", "timeout" if covered is None else "covered").inc()
    if covered is None:
        raise ApiError(503, "not_yet_applied", f"board {board!r} does not cover the token after {wait_ms} ms")
