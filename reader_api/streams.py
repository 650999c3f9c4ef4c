"""Live answers for Server-Sent Events, read once however many clients watch.

One channel per question (the board asked about and the question with its parameters), started by the first
stream and ended with the last, reads the answer every ``poll_s``; every stream of the channel is handed the
new answer. A stream holds at most one answer not yet sent, the latest: an answer that arrives before the
previous one was sent replaces it (a client never falls more than one version behind), so a slow client costs
one answer and its socket's buffers, never a queue. A stream whose send does not finish within
``send_timeout_s`` is dropped (:mod:`reader_api.sse`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge
from redis.exceptions import RedisError

from reader_api.answers import ErrorBody
from reader_api.errors import ApiError
from reader_api.stream_settings import StreamSettings

log = logging.getLogger("hotboard.api")

#: Backoff of a channel while Redis fails: up to this many poll intervals between tries.
_MAX_BACKOFF_POLLS = 50


@dataclass(frozen=True, slots=True)
class Answer:
    #: The board version the answer was read at; None when the board was never flushed.
    version: int | None
    #: The JSON body, as the non-streaming endpoint answers it; or an error body (``error``).
    body: bytes
    error: bool = False


#: known answer -> the answer now, or None when the board's version is still the known answer's.
Read = Callable[[Answer | None], Awaitable[Answer | None]]


class Subscription:
    """One stream's side of its channel: the latest answer not yet sent, and whether there is one."""

    __slots__ = ("_pending", "gone", "ready")

    def __init__(self) -> None:
        self._pending: Answer | None = None
        self.ready = asyncio.Event()
        #: The client went away: the stream ends.
        self.gone = False

    def offer(self, answer: Answer) -> None:
        self._pending = answer  # replaces one not yet sent: coalesced
        self.ready.set()

    def take(self) -> Answer | None:
        answer, self._pending = self._pending, None
        self.ready.clear()
        return answer

    def leave(self) -> None:
        self.gone = True
        self.ready.set()


@dataclass(eq=False)
class _Channel:
    read: Read
    latest: Answer | None = None
    subscribers: set[Subscription] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class StreamMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge("hotboard_api_streams_open", "Event streams open", registry=registry)
        self.reads = Counter(
            "hotboard_api_stream_reads",
            "Redis reads of the stream channels (one per question and poll)",
            [],
            registry=registry,
        )
        self.events = Counter("hotboard_api_stream_events", "Events sent to streams", registry=registry)
        self.refused = Counter("hotboard_api_streams_refused", "Streams refused at the cap", registry=registry)
        self.dropped = Counter(
            "hotboard_api_streams_dropped", "Streams dropped: a send did not finish in time", registry=registry
        )


class Streams:
    def __init__(self, metrics: StreamMetrics, settings: StreamSettings) -> None:
        self.metrics = metrics
        self.settings = settings
        self.max_streams = settings.api_max_streams
        self.poll_s = settings.api_stream_poll_ms / 1000
        self._channels: dict[Hashable, _Channel] = {}
        self.open = 0

    async def subscribe(self, key: Hashable, read: Read) -> tuple[Subscription, Answer]:
        """A new stream of the question ``key`` and the answer it starts with. Past the cap a 503; the first
        stream of a question reads its answer here, so an unknown board or player is an error, not a stream."""
        if self.open >= self.max_streams:
            self.metrics.refused.inc()
            raise ApiError(503, "too_many_streams", f"this process holds {self.max_streams} streams; retry later")
        channel = self._channels.get(key)
        if channel is None or channel.latest is None:
            answer = await read(None)
            assert answer is not None
            self.metrics.reads.inc()
            channel = self._channels.setdefault(key, _Channel(read))
            channel.latest = channel.latest or answer
        assert channel.latest is not None
        subscription = Subscription()
        channel.subscribers.add(subscription)
        self.open += 1
        self.metrics.open.set(self.open)
        if channel.task is None or channel.task.done():
            channel.task = asyncio.create_task(self._poll(key, channel))
        return subscription, channel.latest

    def unsubscribe(self, key: Hashable, subscription: Subscription) -> None:
        channel = self._channels.get(key)
        if channel is not None and subscription in channel.subscribers:
            channel.subscribers.discard(subscription)
            self.open -= 1
            self.metrics.open.set(self.open)

    async def _poll(self, key: Hashable, channel: _Channel) -> None:
        failures = 0
        try:
            while channel.subscribers:
                await asyncio.sleep(self.poll_s * min(_MAX_BACKOFF_POLLS, 2**failures))
                if not channel.subscribers:
                    break
                try:
                    self._publish(channel, await self._read(channel))
                    failures = 0
                except (RedisError, OSError) as exc:
                    failures += 1
                    log.warning("stream of %r unreadable: %r", key, exc)
        finally:
            if self._channels.get(key) is channel:
                del self._channels[key]

    async def _read(self, channel: _Channel) -> Answer | None:
        self.metrics.reads.inc()
        try:
            return await channel.read(channel.latest)
        except ApiError as exc:  # the board or player went away: said once, as an error event
            body: ErrorBody = {"error": exc.code, "message": exc.message}
            return Answer(None, orjson.dumps(body), error=True)

    @staticmethod
    def _publish(channel: _Channel, answer: Answer | None) -> None:
        """Hand a changed answer to every stream; an answer equal to the last one is not an event."""
        latest = channel.latest
        if answer is None or (latest is not None and answer.body == latest.body and answer.error == latest.error):
            if answer is not None:
                channel.latest = answer  # the version moved, the answer did not: new streams start from it
            return
        channel.latest = answer
        for subscription in channel.subscribers:
            subscription.offer(answer)

    async def close(self) -> None:
        tasks = [c.task for c in self._channels.values() if c.task is not None]
        for channel in self._channels.values():
            for subscription in channel.subscribers:
                subscription.leave()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._channels.clear()
