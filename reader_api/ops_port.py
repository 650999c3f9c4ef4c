"""The API's ops port: ``GET /metrics`` for Prometheus on a listener of its own, so the client-facing port never
serves it (request counts per route, cache hit rates and latency are not for clients) and a NetworkPolicy can open
this port to the scraper alone.

A tiny responder in the API's own event loop, not a second HTTP stack: one request per connection, the head
read under a deadline and a size cap, the connection closed after the answer. A client that sends nothing, too
much or garbage is dropped quietly: no traceback per connection, no thread per connection.
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

#: Largest request head read; Prometheus sends a few hundred bytes.
HEAD_MAX_BYTES = 8192


async def serve(host: str, port: int, registry: CollectorRegistry, head_timeout_s: float) -> asyncio.Server:
    """Listen on ``host:port``; the caller closes the returned server."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(head_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
                writer.write(answer(head, registry))
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # silent, too slow, too large or gone: nothing worth a log line per connection
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, limit=HEAD_MAX_BYTES)


def answer(head: bytes, registry: CollectorRegistry) -> bytes:
    """The whole response to one request head."""
    method, _, rest = head.partition(b" ")
    target = rest.partition(b" ")[0].partition(b"?")[0]
    if target != b"/metrics":
        return _response(b"404 Not Found", b"text/plain; charset=utf-8", b"only /metrics here\n")
    if method != b"GET":
        return _response(b"405 Method Not Allowed", b"text/plain; charset=utf-8", b"GET only\n", b"Allow: GET\r\n")
    return _response(b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest(registry))


def _response(status: bytes, content_type: bytes, body: bytes, extra: bytes = b"") -> bytes:
    head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
    return head % (status, content_type, len(body), extra) + body
