"""Live answers for Server-Sent Events: per board one watcher, however many questions and clients watch it.

A question is a board asked about and the question with its parameters (``top`` with its ``limit``, a player's
``around`` with its ``radius``); every stream of one question shares its answer. Per board one watcher, started
by the board's first stream and ended with its last, reads the board's version every ``poll_s`` (one HGET
however many questions and clients); only when the version moved does it read the answer of every question of
the board, all of them in one pipelined round trip, and hand each changed answer to the question's streams. So
1,000 clients each watching their own neighbourhood cost one small read per poll and one round trip per
applied window, not 1,000 reads per poll. A board with no version (declared and not yet written, or gone) has
its questions read every poll: its deletion writes no version.

A stream holds at most one answer not yet sent, the latest: an answer that arrives before the previous one was
sent replaces it (a client never falls more than one version behind), so a slow client costs one answer and
its socket's buffers, never a queue. A stream whose send does not finish within ``send_timeout_s`` is dropped
(:mod:`reader_api.sse`). No pub/sub: it would hold one more connection per process and a subscriber to end at
shutdown; the version poll is one small command on the pool's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from hotboard import keys
from hotboard.redis_client import Client
from hotboard.script import rerun_unknown
from reader_api.answers import ErrorBody
from reader_api.errors import REDIS_FAILURES, ApiError
from reader_api.snapshot import Call
from reader_api.stream_settings import StreamSettings

log = logging.getLogger("hotboard.api")

#: Backoff of a board's watcher while Redis fails: up to this many poll intervals between tries.
_MAX_BACKOFF_POLLS = 50


@dataclass(frozen=True, slots=True)
class Answer:
    #: The board version the answer was read at; None when the board was never flushed.
    version: int | None
    #: The JSON body, as the non-streaming endpoint answers it; or an error body (``error``).
    body: bytes
    error: bool = False


@dataclass(frozen=True, slots=True)
class Question:
    """What the streams of one answer ask: the Redis ``board`` whose version the watcher polls, the script
    ``call`` (sent with the board's other questions in one pipeline) and how its reply becomes the answer
    (``ApiError`` when the board or player went away)."""

    key: Hashable
    board: str
    call: Call
    answer: Callable[[Any], Awaitable[Answer]]


class BoardReads(Protocol):
    """The two reads of the watchers (a fake in the unit tests)."""

    async def version(self, board: str) -> int | bytes | None:
        """The board's version (None when the board has none; the bytes stored when they are not a number)."""

    async def replies(self, calls: Sequence[Call]) -> list[Any]:
        """The replies of ``calls`` sent together, in order; a failed call's reply is its exception."""


class RedisReads:
    """:class:`BoardReads` from Redis: HGET of the meta hash's version; the calls in one pipeline (not a
    transaction: each script is a snapshot of its own), on the client's pool like every other read."""

    def __init__(self, redis: Client) -> None:
        self._redis = redis

    async def version(self, board: str) -> int | bytes | None:
        raw = await self._redis.hget(keys.meta_key(board), keys.META_VERSION)
        if raw is None:
            return None
        data = raw.encode() if isinstance(raw, str) else raw
        return int(data) if data.isdigit() else data

    async def replies(self, calls: Sequence[Call]) -> list[Any]:
        async def send(indices: Sequence[int], again: bool = False) -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for i in indices:
                    call = calls[i]
                    pipe.execute_command(*(call.script.again if again else call.script.command)(call.keys, call.args))
                replies: list[Any] = await pipe.execute(raise_on_error=False)
            return replies

        scripts = {call.script for call in calls}
        first = await send(range(len(calls)))
        return await rerun_unknown(self._redis, scripts, first, lambda indices: send(indices, again=True))


class Subscription:
    """One stream's side of its question: the latest answer not yet sent, and whether there is one."""

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
    """One question's latest answer and the streams watching it."""

    question: Question
    latest: Answer
    #: The board version the answer is known to be current at: the polled one it was read after, or (a question's
    #: first answer) the version that answer was read at.
    known: object
    subscribers: set[Subscription] = field(default_factory=set)

    def publish(self, answer: Answer) -> None:
        """Hand a changed answer to every stream; an answer equal to the last one is not an event."""
        latest, self.latest = self.latest, answer  # the version moved, the answer maybe not: new streams start here
        if answer.body != latest.body or answer.error != latest.error:
            for subscription in self.subscribers:
                subscription.offer(answer)


@dataclass(eq=False)
class _Board:
    """One board's questions and its watcher."""

    name: str
    channels: dict[Hashable, _Channel] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class StreamMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge("hotboard_api_streams_open", "Event streams open", registry=registry)
        self.version_checks = Counter(
            "hotboard_api_stream_version_checks",
            "Reads of a watched board's version (one per board and poll, however many streams)",
            registry=registry,
        )
        self.answer_reads = Counter(
            "hotboard_api_stream_answer_reads",
            "Answer reads of the streams (one per question and version change; a stream's first one)",
            registry=registry,
        )
        self.round_trips = Counter(
            "hotboard_api_stream_answer_round_trips",
            "Round trips of the answer reads (one per board and version change: its questions pipelined)",
            registry=registry,
        )
        self.events = Counter("hotboard_api_stream_events", "Events sent to streams", registry=registry)
        self.refused = Counter("hotboard_api_streams_refused", "Streams refused at the cap", registry=registry)
        self.dropped = Counter(
            "hotboard_api_streams_dropped", "Streams dropped: a send did not finish in time", registry=registry
        )


class Streams:
    def __init__(self, metrics: StreamMetrics, settings: StreamSettings, reads: BoardReads) -> None:
        self.metrics = metrics
        self.settings = settings
        self.reads = reads
        self.max_streams = settings.api_max_streams
        self.poll_s = settings.api_stream_poll_ms / 1000
        self._boards: dict[str, _Board] = {}
        self.open = 0

    async def subscribe(self, question: Question) -> tuple[Subscription, Answer]:
        """A new stream of ``question`` and the answer it starts with. Past the cap a 503; the first stream of a
        question reads its answer here, so an unknown board or player is an error, not a stream. The slot is
        taken before that read (streams starting together cannot all pass the cap) and given back if it fails."""
        if self.open >= self.max_streams:
            self.metrics.refused.inc()
            raise ApiError(503, "too_many_streams", f"this process holds {self.max_streams} streams; retry later")
        self.open += 1
        board = self._boards.get(question.board)
        channel = None if board is None else board.channels.get(question.key)
        if channel is None:
            try:
                answer = await self._read_one(question)  # raises ApiError: no stream
            except BaseException:
                self.open -= 1
                raise
            board = self._boards.get(question.board)  # another stream may have started it meanwhile
            if board is None:
                board = self._boards[question.board] = _Board(question.board)
            channel = board.channels.setdefault(question.key, _Channel(question, answer, answer.version))
        assert board is not None
        subscription = Subscription()
        channel.subscribers.add(subscription)
        self.metrics.open.set(self.open)
        if board.task is None or board.task.done():
            board.task = asyncio.create_task(self._watch(board))
        return subscription, channel.latest

    def unsubscribe(self, question: Question, subscription: Subscription) -> None:
        board = self._boards.get(question.board)
        channel = None if board is None else board.channels.get(question.key)
        if board is not None and channel is not None and subscription in channel.subscribers:
            channel.subscribers.discard(subscription)
            if not channel.subscribers:
                del board.channels[question.key]
            self.open -= 1
            self.metrics.open.set(self.open)

    async def _watch(self, board: _Board) -> None:
        failures = 0
        try:
            while board.channels:
                await asyncio.sleep(self.poll_s * min(_MAX_BACKOFF_POLLS, 2**failures))
                if not board.channels:
                    break
                try:
                    await self.poll(board)
                    failures = 0
                except REDIS_FAILURES as exc:
                    failures += 1
                    log.warning("streams of board %r unreadable: %r", board.name, exc)
                except Exception:  # a reply no question could parse: its streams wait, backed off, not orphaned
                    failures += 1
                    log.exception("streams of board %r: a poll failed", board.name)
        finally:
            if self._boards.get(board.name) is board:
                del self._boards[board.name]
            # ended with streams still on it (cancelled): they end too, and leave the count they held
            for channel in board.channels.values():
                for subscription in channel.subscribers:
                    subscription.leave()
                    self.open -= 1
                channel.subscribers.clear()
            board.channels.clear()
            self.metrics.open.set(self.open)

    async def poll(self, board: _Board) -> None:
        """One poll: the version, and only when it moved the answer of every question behind it, in one round trip.
        Per question, not per board: a question that joined meanwhile may hold an answer older or newer than the
        others'."""
        self.metrics.version_checks.inc()
        version = await self.reads.version(board.name)
        # a board without a version (declared, no window yet; or gone) may still change: deleted, declared again
        # or FLUSHALLed, none of which writes a version, so its questions are read every poll, as before the watcher
        channels = [c for c in board.channels.values() if version is None or c.known != version]  # at most the cap
        if not channels:
            return
        self.metrics.answer_reads.inc(len(channels))
        self.metrics.round_trips.inc()
        replies = await self.reads.replies([c.question.call for c in channels])
        answers = [await self._answer(c.question, reply) for c, reply in zip(channels, replies, strict=True)]
        for channel, answer in zip(channels, answers, strict=True):  # only once all were read: a failure reads again
            channel.publish(answer)
            channel.known = version

    async def _read_one(self, question: Question) -> Answer:
        self.metrics.answer_reads.inc()
        self.metrics.round_trips.inc()
        (reply,) = await self.reads.replies([question.call])
        if isinstance(reply, Exception):
            raise reply
        return await question.answer(reply)

    @staticmethod
    async def _answer(question: Question, reply: Any) -> Answer:
        """The reply's answer; a board or player that went away is said once, as an error event. A reply that
        is a Redis error fails the whole poll (backoff, then read again)."""
        if isinstance(reply, Exception):
            raise reply
        try:
            return await question.answer(reply)
        except ApiError as exc:
            body: ErrorBody = {"error": exc.code, "message": exc.message}
            return Answer(None, orjson.dumps(body), error=True)

    async def close(self) -> None:
        tasks = [b.task for b in self._boards.values() if b.task is not None]
        for board in self._boards.values():
            for channel in board.channels.values():
                for subscription in channel.subscribers:
                    subscription.leave()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._boards.clear()
