"""Calling a Lua script by its SHA1, the one way hotboard does: EVALSHA, and on NOSCRIPT load it and send again.

Redis forgets its scripts when it restarts (and on SCRIPT FLUSH). A NOSCRIPT reply ran nothing, so loading
the script and sending exactly the calls that got it once more is safe, for one call (:meth:`Script.__call__`)
as for many whose replies come back together (:func:`rerun_unknown`: a pipeline, or the flusher's streamed
wire, ``flusher.wire.scripts``). The text goes over the wire only then, never with every call.

A script whose first line declares ``#!lua flags=no-writes`` (the read API's) is sent as EVALSHA_RO: a read
command, which a Redis Cluster client reading from replicas sends to a replica (EVALSHA always goes to the
master). A replica holds no script SCRIPT LOAD gave its master (Redis 7 replicates neither SCRIPT LOAD nor the
script cache), so such a script's NOSCRIPT is answered by EVAL_RO with its text, on whichever node redis-py
picks: that runs the call and caches the script there.
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


def no_writes(script: str) -> bool:
    """Whether ``script`` declares the ``no-writes`` flag on its ``#!lua`` first line (Redis 7 script flags)."""
    first = script.partition("\n")[0]
    if not first.startswith("#!lua"):
        return False
    flags = next((w.removeprefix("flags=") for w in first.split()[1:] if w.startswith("flags=")), "")
    return "no-writes" in flags.split(",")


class Script:
    """A script called by its SHA1 (EVALSHA, or EVALSHA_RO when it declares ``no-writes``: :attr:`read_only`).
    The call goes straight through ``execute_command``: redis-py's Script object adds a deprecation wrapper and
    an import per call, a fifth of the read API's CPU per request in a py-spy profile."""

    __slots__ = ("read_only", "sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = digest(text)
        self.read_only = no_writes(text)

    def command(self, keys: Sequence[str], args: Sequence[Any]) -> list[Any]:
        """The EVALSHA (EVALSHA_RO) command, to send with others (see :func:`rerun_unknown`)."""
        return ["EVALSHA_RO" if self.read_only else "EVALSHA", self.sha, len(keys), *keys, *args]

    def again(self, keys: Sequence[str], args: Sequence[Any]) -> list[Any]:
        """The command to send once more after NOSCRIPT (and :meth:`load`): a read-only script's EVAL_RO with its
        text, which runs and caches it on the node that answers (a replica never got the load), else
        :meth:`command`."""
        if self.read_only:
            return ["EVAL_RO", self.text, len(keys), *keys, *args]
        return self.command(keys, args)

    def packed(self, keys: Sequence[str], args: Sequence[Any]) -> bytes:
        """The command packed by hiredis (in C: a flush call carries thousands of arguments)."""
        return pack_command(tuple(self.command(keys, args)))  # type: ignore[no-any-return]

    async def load(self, redis: Client) -> None:
        await redis.script_load(self.text)

    async def __call__(self, redis: Client, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One call; its error, if any, raised."""
        try:
            return await redis.execute_command(*self.command(keys, args))
        except NoScriptError:
            if not self.read_only:
                await self.load(redis)
            return await redis.execute_command(*self.again(keys, args))


async def rerun_unknown(
    redis: Client,
    scripts: Iterable[Script],
    replies: list[Any],
    resend: Callable[[list[int]], Awaitable[list[Any]]],
) -> list[Any]:
    """``replies`` of calls sent together (each a reply or an error instance, in order), with every NOSCRIPT one
    replaced by its call's second answer: ``scripts`` (those the calls use; the reply does not say which one
    Redis missed) are loaded and ``resend(indices)`` sends exactly those calls once more, answering in order
    (each as :meth:`Script.again`: a read-only script's resent EVALSHA_RO would meet NOSCRIPT again on a
    replica)."""
    again = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if again:
        for script in scripts:
            await script.load(redis)
        for i, reply in zip(again, await resend(again), strict=True):
            replies[i] = reply
    return replies
