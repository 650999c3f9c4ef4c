"""Calling a Lua script by its SHA1, the one way hotboard does: EVALSHA, and on NOSCRIPT load it and send again.

Redis forgets its scripts when it restarts (and on SCRIPT FLUSH). A NOSCRIPT reply ran nothing, so loading
the script and sending exactly the calls that got it once more is safe, for one call (:meth:`Script.__call__`)
as for many whose replies come back together (:func:`rerun_unknown`: a pipeline, or the flusher's streamed
wire, ``flusher.wire.scripts``). The text goes over the wire only then, never with every call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from hashlib import sha1
from typing import Any

from hiredis import pack_command
from redis.exceptions import NoScriptError

from hotboard.redis_client import Client


def digest(script: str) -> str:
    """The SHA1 Redis files a script under."""
    return sha1(script.encode()).hexdigest()


class Script:
    """A script called by its SHA1 (EVALSHA). EVALSHA goes straight through ``execute_command``: redis-py's
    Script object adds a deprecation wrapper and an import per call, a fifth of the read API's CPU per request
    in a py-spy profile."""

    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = digest(text)

    def command(self, keys: Sequence[str], args: Sequence[Any]) -> list[Any]:
        """The EVALSHA command, to send with others (see :func:`rerun_unknown`)."""
        return ["EVALSHA", self.sha, len(keys), *keys, *args]

    def packed(self, keys: Sequence[str], args: Sequence[Any]) -> bytes:
        """The command packed by hiredis (in C: a flush call carries thousands of arguments)."""
        return pack_command(tuple(self.command(keys, args)))  # type: ignore[no-any-return]

    async def load(self, redis: Client) -> None:
        await redis.script_load(self.text)

    async def __call__(self, redis: Client, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One call; its error, if any, raised."""
        try:
            return await redis.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.load(redis)
            return await redis.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)


async def rerun_unknown(
    redis: Client,
    scripts: Iterable[Script],
    replies: list[Any],
    resend: Callable[[list[int]], Awaitable[list[Any]]],
) -> list[Any]:
    """``replies`` of calls sent together (each a reply or an error instance, in order), with every NOSCRIPT one
    replaced by its call's second answer: ``scripts`` (those the calls use; the reply does not say which one
    Redis missed) are loaded and ``resend(indices)`` sends exactly those calls once more, answering in order."""
    again = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if again:
        for script in scripts:
            await script.load(redis)
        for i, reply in zip(again, await resend(again), strict=True):
            replies[i] = reply
    return replies
