"""``POST …/scores?wait=true`` and its ``exact`` flag, against a real redis-server, with the order of windows and
polls chosen by the test: the API's producer is replaced by one that only numbers the write's record (no Kafka),
and every window, the write's and other players', is applied by the worker's own flush (:class:`RedisSink`)
right before the poll the schedule names. The truth, the write's player right after the write's window, is read
from Redis the moment that window lands.

What it shows: ``exact: true`` only when the answer is that state; two windows landing between two polls give
``exact: false`` whichever came first, and the Redis state the API reads is then the same for both orders (so no
rule on scores, watermarks and version could say which, docs/api.md); one window between two polls gives
``exact: true``."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, BoardBatch, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_removal, keys
from reader_api import waits as waits_module
from reader_api.answers import ScoreAfterWrite
from reader_api.app import create_app
from reader_api.producer import EventProducer
from reader_api.settings import ApiSettings
from tests.integration.reader_harness import asgi_client, conforms

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOPIC = "scores"
BOARD = "b"
#: The partition the API's writes land on; other players' windows come from the others.
WRITE_PARTITION = 0
#: The poll's own script, wrapped afresh by each schedule.
POLL = waits_module._MARKS


class NumberingProducer(EventProducer):
    """Kafka's part of a write, without Kafka: each record gets the next offset of :data:`WRITE_PARTITION` and
    waits, in ``sent``, for the test to apply its window."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1", TOPIC, 1.0)
        self.next_offset = 0
        self.sent: list[tuple[int, dict[str, Any]]] = []

    async def start(self) -> None:
        return None

    async def send(self, records: Sequence[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
        acks = []
        for _, value in records:
            self.sent.append((self.next_offset, orjson.loads(value)))
            acks.append((WRITE_PARTITION, self.next_offset))
            self.next_offset += 1
        return acks

    async def close(self) -> None:
        return None


#: One step of the schedule: the window of the API's pending write (``"write"``), ``boards delete`` with its
#: delete point past the write (which is then never applied), or a window of (player, delta) on another partition.
Window = str | tuple[str, int]


@dataclass
class Fleet:
    """The worker's side: windows applied by its flush script, in the order the schedule says, each fenced on the
    watermarks the previous ones left."""

    redis: Redis
    producer: NumberingProducer
    sink: RedisSink = field(init=False)
    marks: dict[int, int] = field(default_factory=dict)
    others: int = 0
    #: The write's player right after the write's window: (score, rank, total).
    truth: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        self.sink = RedisSink(self.redis, TOPIC)

    async def apply(self, deltas: dict[str, int], partition: int, offset: int) -> None:
        [result] = await self.sink.flush(
            [BoardBatch(BOARD, deltas, {partition: offset})], lambda _, p: self.marks.get(p, NO_WATERMARK)
        )
        assert result.outcome is Outcome.APPLIED, result
        self.marks[partition] = offset

    async def window(self, window: Window) -> None:
        if window == "delete":
            ((offset, _),) = self.producer.sent
            self.producer.sent.clear()
            points = {p: self.marks.get(p, -1) for p in range(4)} | {WRITE_PARTITION: offset}
            deleted = await board_removal.delete(self.redis, TOPIC, BOARD, points)
            self.marks |= {p: o for p, o in deleted.points.items() if o >= 0}
            return
        if not isinstance(window, str):
            player, delta = window
            self.others += 1
            await self.apply({player: delta}, 1 + self.others % 3, self.others)
            return
        ((offset, event),) = self.producer.sent
        self.producer.sent.clear()
        await self.apply({event["player"]: event["delta"]}, WRITE_PARTITION, offset)
        score = int(await self.redis.zscore(keys.board_key(BOARD), event["player"]) or 0)
        better = await self.redis.zcount(keys.board_key(BOARD), f"({score}", "+inf")  # desc, shared ties
        self.truth = (score, better + 1, await self.redis.zcard(keys.board_key(BOARD)))


@asynccontextmanager
async def api(redis_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, NumberingProducer]]:
    producer = NumberingProducer()
    settings = ApiSettings(
        redis=redis_url, kafka="127.0.0.1:1", topic=TOPIC, api_write_tokens=TOKEN, api_write_burst=10_000
    )
    async with asgi_client(create_app(settings, producer=producer)) as client:
        yield client, producer


def scheduled(monkeypatch: pytest.MonkeyPatch, fleet: Fleet, schedule: list[list[Window]]) -> None:
    """Before the n-th poll of the waiting write (the poller's snapshot reading its player), the windows
    ``schedule[n]``: so those of one entry land between two polls. The version read before the produce is a
    snapshot too, and lands nothing."""
    pending = list(schedule)

    async def then_poll(redis: Any, script_keys: Any, args: Any) -> Any:
        if len(args) > 1 + int(args[0]) and pending:  # a poll that reads the waiting player
            for window in pending.pop(0):
                await fleet.window(window)
        return await POLL(redis, script_keys, args)

    monkeypatch.setattr(waits_module, "_MARKS", then_poll)


async def update_then_rank(client: httpx.AsyncClient, player: str, delta: int) -> ScoreAfterWrite:
    url = f"/v1/boards/{BOARD}/players/{player}/scores"
    r = await client.post(url, params={"wait": "true", "wait_ms": "10000"}, json={"delta": delta}, headers=AUTH)
    assert r.status_code == 200, r.text
    answer: ScoreAfterWrite = r.json()
    conforms(answer, ScoreAfterWrite)
    return answer


async def state(redis: Redis) -> tuple[Any, ...]:
    """All the API's rule could look at: scores, watermarks, version."""
    return (
        await redis.zrange(keys.board_key(BOARD), 0, -1, withscores=True),
        await redis.hgetall(keys.applied_key(BOARD)),
        await redis.hget(keys.meta_key(BOARD), keys.META_VERSION),
    )


#: The board before the write: lead 100, mid 50. The write puts "me" at 60 (rank 2 of 3); the rival's 70 then
#: passes it (rank 3 of 4).
START = [("lead", 100), ("mid", 50)]
RIVAL: Window = ("rival", 70)


@pytest.mark.parametrize(
    ("schedule", "exact", "truth"),
    [
        ([[], ["write"]], True, (60, 2, 3)),  # one window between two polls
        ([[], ["write"], [RIVAL]], True, (60, 2, 3)),  # one per interval: read before the rival's lands
        ([[], ["write", RIVAL]], False, (60, 2, 3)),  # two windows: the answer is later, rank 3 of 4
        ([[], [RIVAL, "write"]], False, (60, 3, 4)),  # two windows: the answer is the truth, not known to be
        ([["write", RIVAL]], False, (60, 2, 3)),  # both before the first poll, after the version read
    ],
    ids=["one-window", "one-per-poll", "write-then-rival", "rival-then-write", "both-before-first-poll"],
)
async def test_exact_only_when_one_window_landed_between_the_polls(
    redis_url: str,
    redis_client: Redis,
    monkeypatch: pytest.MonkeyPatch,
    schedule: list[list[Window]],
    exact: bool,
    truth: tuple[int, int, int],
) -> None:
    async with api(redis_url) as (client, producer):
        fleet = Fleet(redis_client, producer)
        for window in START:
            await fleet.window(window)
        scheduled(monkeypatch, fleet, schedule)
        answer = await update_then_rank(client, "me", 60)
    assert fleet.truth == truth
    assert answer["exact"] is exact, answer
    if answer["exact"]:
        assert (answer["score"], answer["rank"], answer["total"]) == fleet.truth, answer


async def test_two_windows_between_polls_leave_the_same_state_in_either_order(
    redis_url: str, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write then rival, or rival then write: the same scores, watermarks and version, but the state right after
    the write's window differs (rank 2 of 3, or 3 of 4). One answer serves both, so it cannot say ``exact: true``."""
    seen = []
    for order in (["write", RIVAL], [RIVAL, "write"]):
        await redis_client.flushall()
        async with api(redis_url) as (client, producer):
            fleet = Fleet(redis_client, producer)
            for window in START:
                await fleet.window(window)
            scheduled(monkeypatch, fleet, [[], order])
            answer = await update_then_rank(client, "me", 60)
        seen.append((await state(redis_client), fleet.truth, answer))
    (state_a, truth_a, answer_a), (state_b, truth_b, answer_b) = seen
    assert state_a == state_b
    assert truth_a != truth_b
    assert not answer_a["exact"] and not answer_b["exact"]
    assert {k: v for k, v in answer_a.items() if k not in ("token", "as_of")} == {
        k: v for k, v in answer_b.items() if k not in ("token", "as_of")
    }


async def test_a_delete_then_a_window_between_two_polls_is_not_exact(
    redis_url: str, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``boards delete`` covers the pending write (its delete point is past it: the event is removed, never
    applied), then another window writes the player afresh, both between two polls. The answer is the board after
    them, without the write; it is no state right after a window that applied the write, so not ``exact``: the
    delete is a version step of its own (before, the delete kept the version and the window took the one right
    after the version the waiter had seen)."""
    async with api(redis_url) as (client, producer):
        fleet = Fleet(redis_client, producer)
        for window in START:
            await fleet.window(window)
        scheduled(monkeypatch, fleet, [[], ["delete", ("me", 5)]])
        answer = await update_then_rank(client, "me", 60)
    assert fleet.truth is None, "no window applied the write"
    assert (answer["score"], answer["rank"], answer["total"]) == (5, 1, 1)
    assert answer["exact"] is False, answer


async def test_random_schedules_never_say_exact_for_another_state(
    redis_url: str, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many writes, other players' windows before, with and after each, spread over the polls at random:
    ``exact`` is true exactly when the write's window landed alone between two polls, and then the answer is the
    state right after it."""
    rng = random.Random(20261203)
    outcomes = {True: 0, False: 0}
    async with api(redis_url) as (client, producer):
        fleet = Fleet(redis_client, producer)
        for window in START:
            await fleet.window(window)

        def others() -> list[Window]:
            return [(f"p{rng.randrange(8)}", rng.randrange(1, 120)) for _ in range(rng.choice([0, 0, 1, 2]))]

        for n in range(60):
            with_write = [*others(), "write", *others()]
            schedule = [others() for _ in range(rng.randrange(3))] + [with_write, others()]
            scheduled(monkeypatch, fleet, schedule)
            answer = await update_then_rank(client, f"me{n % 5}", rng.randrange(1, 120))
            alone = with_write == ["write"]
            assert answer["exact"] is alone, (n, schedule, answer)
            if answer["exact"]:
                assert (answer["score"], answer["rank"], answer["total"]) == fleet.truth, (n, schedule, answer)
            outcomes[answer["exact"]] += 1
    assert outcomes[True] and outcomes[False], outcomes
