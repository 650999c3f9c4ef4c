"""Commands on the wire: packed by hiredis in C and sent on one pooled connection as they come, one round trip.

redis-py's asyncio pipeline packs in Python, and awaits every reply through its own timeout: both cost more than
Redis spends running the scripts when a window holds 100,000 boards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hiredis import pack_command
from redis.asyncio import Redis
from redis.exceptions import NoScriptError, ResponseError

from hotboard import lua

#: Commands go out in writes of about this size as they are packed: Redis runs the first scripts while Python
#: packs the next (two cores, not one after the other).
WRITE_BYTES = 1 << 18


async def stream(redis: Redis, commands: Iterable[bytes], sent: list[bytes] | None = None) -> list[Any]:
    """Send packed commands as they come, then read each reply (or error reply) in order. ``sent`` keeps what
    was sent (to resend after NOSCRIPT)."""
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        count = 0
        buffer: list[bytes] = []
        size = 0
        for packed in commands:
            buffer.append(packed)
            size += len(packed)
            if size >= WRITE_BYTES:
                await conn.send_packed_command(buffer, check_health=count == 0)
                count += len(buffer)
                if sent is not None:
                    sent += buffer
                buffer, size = [], 0
        if buffer:
            await conn.send_packed_command(buffer, check_health=count == 0)
            count += len(buffer)
            if sent is not None:
                sent += buffer
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # an error reply (NOSCRIPT, WRONGTYPE...): the stream stays in sync
                replies.append(exc)
    except BaseException:
        # Half-read replies would poison the next user of this connection. A command sent before the error
        # ran or not, like any lost reply: its board's watermark says which, and the retry is fenced by it.
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    return replies


async def script(redis: Redis, code: lua.Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """One script call packed by hiredis (a thousand arguments); NOSCRIPT loads it. Raises its error reply."""
    packed = pack_command(tuple(code.command(keys, args)))
    (reply,) = await stream(redis, [packed])
    if isinstance(reply, NoScriptError):
        await redis.script_load(code.text)
        (reply,) = await stream(redis, [packed])
    if isinstance(reply, Exception):
        raise reply
    return reply
