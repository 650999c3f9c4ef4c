"""The pure parts of live streams, without a server: the event encoding, a stream's one pending answer, the cap,
and the board watcher against a fake reader: one version read per board and poll however many questions
watch it, and the answers read (all of the board's questions in one batch) only when the version moved."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from redis.exceptions import ConnectionError as RedisConnectionError

from hotboard.script import Script
from reader_api.errors import ApiError, not_found
from reader_api.snapshot import Call
from reader_api.sse import event
from reader_api.stream_settings import StreamSettings
from reader_api.streams import Answer, Question, StreamMetrics, Streams, Subscription

_SCRIPT = Script("return 1")


@pytest.mark.parametrize(
    ("answer", "encoded"),
    [
        (Answer(7, b'{"a":1}'), b'id: 7\ndata: {"a":1}\n\n'),
        (Answer(None, b"{}"), b"data: {}\n\n"),
        (Answer(None, b'{"error":"x"}', error=True), b'event: error\ndata: {"error":"x"}\n\n'),
    ],
)
def test_event_encoding(answer: Answer, encoded: bytes) -> None:
    assert event(answer) == encoded


def test_a_subscription_holds_only_the_latest_answer() -> None:
    s = Subscription()
    for version in (1, 2, 3):
        s.offer(Answer(version, b"x"))
    assert s.ready.is_set()
    assert s.take() == Answer(3, b"x") and s.take() is None and not s.ready.is_set()
    s.leave()
    assert s.gone and s.ready.is_set()


class FakeReads:
    """Boards in memory: each board's version, each question's body; every read logged in order."""

    def __init__(self) -> None:
        self.versions: dict[str, int | None] = {}
        self.bodies: dict[tuple[str, str], bytes | None] = {}  # None: the player went away
        self.log: list[tuple[str, str, int]] = []  # ("version", board, 1) or ("replies", board, calls)
        self.fail_replies = 0
        self.read = asyncio.Event()

    async def version(self, board: str) -> int | None:
        self.log.append(("version", board, 1))
        self.read.set()
        return self.versions.get(board)

    async def replies(self, calls: Sequence[Call]) -> list[Any]:
        self.log.append(("replies", calls[0].keys[0], len(calls)))
        self.read.set()
        if self.fail_replies:
            self.fail_replies -= 1
            raise RedisConnectionError("Redis away")
        return [(c.keys[0], c.args[0], self.versions.get(c.keys[0])) for c in calls]

    def question(self, board: str, name: str) -> Question:
        self.bodies.setdefault((board, name), f"{board}/{name}".encode())

        async def answer(reply: Any) -> Answer:
            body = self.bodies[(board, reply[1])]
            if body is None:
                raise not_found("player", f"{reply[1]} left")
            return Answer(reply[2], body)

        return Question((board, name), board, Call(_SCRIPT, [board], [name]), answer)

    async def until(self, entries: int) -> None:
        """Until the log holds ``entries`` entries (the watchers poll every millisecond)."""
        async with asyncio.timeout(10):
            while len(self.log) < entries:
                self.read.clear()
                await self.read.wait()


def streams_of(
    reads: FakeReads, poll_ms: int = 1, cap: int = 1000, registry: CollectorRegistry | None = None
) -> Streams:
    settings = StreamSettings(api_max_streams=cap, api_stream_poll_ms=poll_ms)
    return Streams(StreamMetrics(registry or CollectorRegistry()), settings, reads)


async def test_one_version_read_per_board_and_poll_and_answers_read_together_only_on_a_change() -> None:
    reads = FakeReads()
    reads.versions = {"b": 1, "c": 7}
    registry = CollectorRegistry()
    streams = streams_of(reads, registry=registry)
    questions = [reads.question("b", f"p{i}") for i in range(50)]
    subscriptions = [(await streams.subscribe(q))[0] for q in questions]
    shared, first = await streams.subscribe(questions[0])  # a second client of one question reads nothing
    other, _ = await streams.subscribe(reads.question("c", "top"))
    assert first == Answer(1, b"b/p0") and len(reads.log) == 51  # the first stream of each question read it
    del reads.log[:]
    await reads.until(40)
    assert {kind for kind, _, _ in reads.log} == {"version"}  # each poll one read per board, nothing else
    assert abs(sum(b == "b" for _, b, _ in reads.log) - sum(b == "c" for _, b, _ in reads.log)) <= 1

    reads.versions["b"] = 2
    for name in ("p3", "p0"):
        reads.bodies[("b", name)] = b"moved"
    seen = len(reads.log)
    while ("replies", "b", 50) not in reads.log[seen:]:
        await reads.until(len(reads.log) + 1)
    await reads.until(len(reads.log) + 4)  # polls after the change read only the version again
    assert [e for e in reads.log[seen:] if e[0] == "replies"] == [("replies", "b", 50)]  # one batch, every question
    ready = [i for i, s in enumerate(subscriptions) if s.ready.is_set()]
    assert ready == [0, 3] and shared.take() == Answer(2, b"moved") and not other.ready.is_set()
    assert registry.get_sample_value("hotboard_api_stream_answer_reads_total") == 51 + 50
    assert registry.get_sample_value("hotboard_api_stream_answer_round_trips_total") == 51 + 1
    await streams.close()


async def test_a_failed_read_backs_off_and_reads_again_and_a_player_gone_is_one_error_event() -> None:
    reads = FakeReads()
    reads.versions = {"b": 1}
    streams = streams_of(reads)
    gone, ok = reads.question("b", "gone"), reads.question("b", "ok")
    (leaving, _), (staying, _) = await streams.subscribe(gone), await streams.subscribe(ok)
    reads.versions["b"], reads.bodies[("b", "gone")], reads.fail_replies = 2, None, 1
    seen = len(reads.log)
    while [e[0] for e in reads.log[seen:]].count("replies") < 2:  # the failed batch, then the one read again
        await reads.until(len(reads.log) + 1)
    await reads.until(len(reads.log) + 3)
    assert [e[0] for e in reads.log[seen:]].count("replies") == 2  # the error event is not read again
    error = leaving.take()
    assert error is not None and error.error and b"player_not_found" in error.body
    assert not staying.ready.is_set()  # its answer did not change
    streams.unsubscribe(gone, leaving)
    streams.unsubscribe(ok, staying)
    assert streams.open == 0
    await streams.close()


async def test_streams_refuse_past_the_cap_and_unknown_questions_raise() -> None:
    reads = FakeReads()
    reads.versions = {"k": 1}
    streams = streams_of(reads, poll_ms=10_000, cap=2)
    question = reads.question("k", "top")
    await streams.subscribe(question)
    reads.bodies[("k", "nobody")] = None
    with pytest.raises(ApiError) as unknown:  # a player not on the board is a 404, not a stream
        await streams.subscribe(reads.question("k", "nobody"))
    assert unknown.value.code == "player_not_found" and streams.open == 1
    await streams.subscribe(question)
    with pytest.raises(ApiError) as refused:
        await streams.subscribe(reads.question("k", "other"))
    assert (refused.value.status, refused.value.code) == (503, "too_many_streams")
    await streams.close()


async def test_concurrent_first_streams_cannot_pass_the_cap_and_a_failed_one_frees_its_slot() -> None:
    """Each first stream of a question awaits its first read: the cap's slot is held across that await, so
    streams starting together cannot all pass the check before any is counted; a first read that fails (a
    player not on the board) frees the slot it held."""
    reads = FakeReads()
    reads.versions = {"k": 1}
    gate = asyncio.Event()
    replies = reads.replies

    async def held(calls: Sequence[Call]) -> list[Any]:
        await gate.wait()
        return await replies(calls)

    reads.replies = held  # type: ignore[method-assign]
    reads.bodies[("k", "nobody")] = None
    streams = streams_of(reads, poll_ms=10_000, cap=2)
    names = ["p1", "nobody", "p2", "p3", "p4"]
    started = [asyncio.create_task(streams.subscribe(reads.question("k", n))) for n in names]
    await asyncio.sleep(0.01)  # every task has passed the check, or been refused, and waits on its read
    assert streams.open == 2
    gate.set()
    outcomes = await asyncio.gather(*started, return_exceptions=True)
    codes = [o.code if isinstance(o, ApiError) else "stream" for o in outcomes]
    assert codes == ["stream", "player_not_found", "too_many_streams", "too_many_streams", "too_many_streams"]
    assert streams.open == 1  # the refused read gave its slot back
    await streams.subscribe(reads.question("k", "p2"))
    assert streams.open == 2
    with pytest.raises(ApiError):
        await streams.subscribe(reads.question("k", "p3"))
    await streams.close()


async def test_a_question_that_joined_at_another_version_is_read_alone_until_all_are_current() -> None:
    """A window applied between two streams' first reads: the later question holds a newer answer than the
    board's others, and the older one must not stay behind until the next window."""
    reads = FakeReads()
    reads.versions = {"b": 1}
    streams = streams_of(reads, poll_ms=10_000)  # polled by hand
    old, new = reads.question("b", "old"), reads.question("b", "new")
    (behind, _) = await streams.subscribe(old)
    reads.versions["b"], reads.bodies[("b", "old")] = 2, b"moved"
    await streams.subscribe(new)  # read at version 2
    del reads.log[:]
    board = streams._boards["b"]
    await streams.poll(board)
    assert reads.log == [("version", "b", 1), ("replies", "b", 1)]  # only the question behind
    assert behind.take() == Answer(2, b"moved")
    await streams.poll(board)
    assert reads.log[2:] == [("version", "b", 1)]
    await streams.close()


async def test_a_watcher_survives_an_unexpected_error_and_its_streams_keep_their_count() -> None:
    """A bug-shaped failure (not Redis's) in one poll backs off and reads again, as a Redis error does: the
    streams stay served, and leaving them brings the open count back to 0 (an orphaned watcher leaked it)."""
    reads = FakeReads()
    reads.versions = {"b": 1}
    failures = [RuntimeError("a reply parser's bug")]
    version = reads.version

    async def flaky(board: str) -> int | None:
        if failures:
            raise failures.pop()
        return await version(board)

    reads.version = flaky  # type: ignore[method-assign]
    streams = streams_of(reads)
    question = reads.question("b", "p")
    subscription, _ = await streams.subscribe(question)
    reads.versions["b"] = 2
    reads.bodies[("b", "p")] = b"moved"
    async with asyncio.timeout(10):
        await subscription.ready.wait()
    assert subscription.take() == Answer(2, b"moved") and not failures
    streams.unsubscribe(question, subscription)
    assert streams.open == 0
    await streams.close()
