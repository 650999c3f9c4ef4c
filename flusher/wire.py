"""Commands on the wire: packed by hiredis in C and sent on one pooled connection as they come, one round trip.

redis-py's asyncio pipeline packs in Python, and awaits every reply through its own timeout: both cost more than
Redis spends running the scripts when a window holds 100,000 boards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError, ResponseError

from hotboard.script import Script, rerun_unknown

#: Commands go out in writes of about this size as they are packed: Redis runs the first scripts while Python
#: packs the next (two cores, not one after the other).
WRITE_BYTES = 1 << 18


async def stream(redis: Redis, commands: Iterable[bytes], sent: list[bytes] | None = None) -> list[Any]:
    """Send packed commands as they come, then read each reply (or error reply) in order. ``sent`` keeps what
    was sent (to resend after NOSCRIPT: :func:`scripts`). When building a command fails, what went out before
    is read back (it ran: its boards' watermarks moved, and a retry is recognised there) and the error raised."""
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await stream_on(conn, commands, sent)
    finally:
        await pool.release(conn)


async def stream_on(conn: Any, commands: Iterable[bytes], sent: list[bytes] | None = None) -> list[Any]:
    """:func:`stream` on a connection the caller holds (a cluster node's), disconnected when it fails."""
    try:
        count = 0
        buffer: list[bytes] = []
        size = 0
        produced = iter(commands)
        while True:
            try:
                packed = next(produced, None)
            except Exception:
                await _replies(conn, count)
                raise
            if packed is None:
                break
            buffer.append(packed)
            size += len(packed)
            if size >= WRITE_BYTES:
                count = await _write(conn, buffer, count, sent)
                buffer, size = [], 0
        if buffer:
            count = await _write(conn, buffer, count, sent)
        replies = await _replies(conn, count)
    except BaseException:
        # Half-read replies would poison the next user of this connection. A command sent before a lost
        # connection ran or not, like any lost reply: its board's watermark says which, and fences the retry.
        await conn.disconnect()
        raise
    return replies


async def _replies(conn: Any, count: int) -> list[Any]:
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(await conn.read_response())
        except ResponseError as exc:  # an error reply (NOSCRIPT, WRONGTYPE...): the stream stays in sync
            replies.append(exc)
    return replies


async def _write(conn: Any, buffer: list[bytes], count: int, sent: list[bytes] | None) -> int:
    """One write of the stream; returns how many commands are out. A connection lost after the first write is
    an error (redis-py would quietly reconnect, and the replies of what went out before are gone with it)."""
    if count and not conn.is_connected:
        raise ConnectionError("the connection closed while a window was being sent")
    try:
        await conn.send_packed_command(buffer, check_health=count == 0)
    except AttributeError as exc:  # closed under the write (its writer is gone): a lost connection
        raise ConnectionError("the connection closed while a window was being sent") from exc
    if sent is not None:
        sent += buffer
    return count + len(buffer)


async def scripts(redis: Redis, commands: Iterable[bytes], used: Sequence[Script]) -> list[Any]:
    """Stream packed script calls (of the scripts ``used``, and commands that are no script) and read each reply
    or error reply in order; the calls answered NOSCRIPT go once more after loading the scripts (see
    :func:`hotboard.script.rerun_unknown`)."""
    sent: list[bytes] = []
    replies = await stream(redis, commands, sent)
    return await rerun_unknown(redis, used, replies, lambda again: stream(redis, [sent[i] for i in again]))


async def script(redis: Redis, code: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """One script call packed by hiredis (a thousand arguments). Raises its error reply."""
    (reply,) = await scripts(redis, [code.packed(keys, args)], (code,))
    if isinstance(reply, Exception):
        raise reply
    return reply
