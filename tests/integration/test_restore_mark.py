"""The restoring mark shared by runs at once: on a Redis Cluster every restore or rebuild swap marks each partition
of the topic restoring between its two checkpoint lowerings, and two runs (two ``--on-redis-loss`` workers after a
FLUSHALL, an operator's restore beside one; boards of any name, since every swap lowers every partition) must
never clear or overwrite each other's mark, nor an older version's (archive.lowering)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from archive import lowering, restore, schema, staging
from archive.pool import Archive
from archive.redis_loss import LossRestorer
from cli.main import main as hotboard
from flusher.checkpoints import CheckpointHash
from hotboard import keys, redis_client
from hotboard.boards import DEFAULT
from hotboard.redis_client import Client
from ingest.errors import TRANSIENT
from ingest.partitions import Halt, HaltReason
from tests.cluster import TestCluster
from tests.integration.harness import worker_settings

pytestmark = pytest.mark.integration

TOPIC = "scores"
#: Partition 0 lowered to the archive's checkpoint, as every swap of these tests lowers it.
LOWERED = ["0", 9, 0]


async def _archive_boards(postgres_url: str, boards: Sequence[str], players: int = 5) -> None:
    """An archive of ``boards``, ``players`` each, partition 0 checkpointed at 9."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await schema.migrate(conn)
        for board in boards:
            await conn.execute("INSERT INTO hb_boards (board, spec, version) VALUES ($1, $2, 3)", board, DEFAULT.spec)
            await conn.copy_records_to_table(
                "hb_scores", records=[(board, f"p{i}", i, None, None) for i in range(players)]
            )
            field = keys.watermark_field(TOPIC, 0, 0)
            await conn.execute("INSERT INTO hb_watermarks VALUES ($1, $2, 9)", board, field)
        await conn.execute("INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ($1, 0, 9)", TOPIC)
    finally:
        await conn.close()


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _count_refusals(monkeypatch: pytest.MonkeyPatch) -> list[lowering.Holder]:
    """``lowering.mark`` wrapped: the holders it was refused by, in order, in the list returned."""
    refusals: list[lowering.Holder] = []
    real = lowering.mark

    async def counted(*args: Any, **kwargs: Any) -> lowering.Holder | None:
        holder = await real(*args, **kwargs)
        if holder is not None:
            refusals.append(holder)
        return holder

    monkeypatch.setattr(lowering, "mark", counted)
    return refusals


async def _marks(client: Client, partition: int = 0) -> list[Any]:
    """A partition's restoring mark: the bare deadline, and the run holding it (``<run> <deadline>``)."""
    fields = [keys.restoring_field(partition), keys.restoring_by_field(partition)]
    return list(await client.hmget(keys.checkpoint_key(TOPIC), fields))


async def _redis_ms(client: Client) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def _past(client: Client, deadline_ms: int) -> None:
    """Polls Redis TIME (the clock marks are read by) until ``deadline_ms`` has passed."""
    until = time.monotonic() + 30
    while await _redis_ms(client) <= deadline_ms:
        assert time.monotonic() < until, "Redis TIME never passed the deadline"
        await asyncio.sleep(0.02)


def _deadline(held: list[Any]) -> int:
    return int(held[0])


@pytest.fixture(params=["redis", "redis-cluster"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """The checkpoint hash on one server or on the real cluster: the lowerings and the checkpoint script are one
    key's scripts either way (only the swap differs)."""
    made: Client
    if request.param == "redis":
        made = Redis.from_url(request.getfixturevalue("redis_url"))
    else:
        cluster: TestCluster = request.getfixturevalue("redis_cluster")
        made = redis_client.connect(cluster.seed, cluster=True)
    try:
        yield made
    finally:
        await made.aclose()


async def test_a_second_run_waits_for_the_first_runs_mark_and_never_clears_it(
    redis_cluster: TestCluster, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run A (board a) is held between its marking lowering and its swap; run B (board b) starts meanwhile. B must
    neither overwrite A's mark nor clear it (the old code did both: B's second lowering deleted the mark while A was
    still between its lowerings, and a worker could move the checkpoint past A's swapped board): B waits, and marks
    only once A cleared its own."""
    await _archive_boards(postgres_url, ["a", "b"])
    client = redis_client.connect(redis_cluster.seed, cluster=True)
    held, release = asyncio.Event(), asyncio.Event()
    real = staging._SWAP
    swapped: list[tuple[str, list[Any]]] = []

    async def swap_script(redis: Client, keys_: list[str], args: list[Any]) -> Any:
        if keys_[0] == keys.board_key("a"):
            held.set()
            await release.wait()
        swapped.append((keys_[0], await _marks(client)))
        return await real(redis, keys_, args)

    refusals = _count_refusals(monkeypatch)
    monkeypatch.setattr(staging, "_SWAP", swap_script)
    now_ms = int(time.time() * 1000)
    try:
        async with Archive(postgres_url) as one, Archive(postgres_url) as other:
            a = asyncio.create_task(restore.restore_board(one, client, TOPIC, "a", now_ms))
            await asyncio.wait_for(held.wait(), 30)
            mark_a = await _marks(client)
            assert mark_a[1] is not None, "A marked partition 0 restoring, naming its run"
            b = asyncio.create_task(restore.restore_board(other, client, TOPIC, "b", now_ms))
            await _until(lambda: b.done() or bool(refusals), "B done or refused")
            assert not b.done(), "B swapped its board in while A was between its lowerings"
            assert refusals[0].run == mark_a[1].decode().split()[0], "B's marking was refused naming A's run"
            assert await _marks(client) == mark_a, "B overwrote or cleared A's mark"
            release.set()
            assert await asyncio.wait_for(a, 30) is not None
            assert await asyncio.wait_for(b, 30) is not None
        [(first, at_a), (second, at_b)] = swapped
        assert (first, second) == (keys.board_key("a"), keys.board_key("b"))
        assert at_a == mark_a
        assert at_b[1] is not None and at_b[1] != mark_a[1], "B swapped under a mark of its own"
        assert await _marks(client) == [None, None], "each run cleared its own mark"
        assert [await client.zcard(keys.board_key(board)) for board in ("a", "b")] == [5, 5]
    finally:
        release.set()
        await client.aclose()


async def test_a_mark_is_taken_only_once_its_holder_cleared_it(client: Client) -> None:
    """Run A marks; run B's marking is refused, naming A, and writes nothing; A clears; only then B marks."""
    assert await lowering.mark(client, TOPIC, LOWERED, "run-a") is None
    held_a = await _marks(client)
    gen = await client.hget(keys.checkpoint_key(TOPIC), keys.gen_field(0))
    refused = await lowering.mark(client, TOPIC, LOWERED, "run-b")
    assert refused is not None and (refused.partition, refused.run) == ("0", "run-a")
    assert refused.deadline_ms == _deadline(held_a) and held_a[1] == f"run-a {held_a[0].decode()}".encode()
    assert await _marks(client) == held_a, "a refused marking writes nothing"
    assert await client.hget(keys.checkpoint_key(TOPIC), keys.gen_field(0)) == gen, "nor bumps the generation"
    await lowering.clear(client, TOPIC, LOWERED, "run-b")  # B's finally, had it given up: A's mark stays
    assert await _marks(client) == held_a
    await lowering.clear(client, TOPIC, LOWERED, "run-a")
    assert await _marks(client) == [None, None]
    assert await lowering.mark(client, TOPIC, LOWERED, "run-b") is None
    assert (await _marks(client))[1].startswith(b"run-b ")


async def test_an_expired_mark_is_taken_at_once_and_its_late_clear_leaves_the_new_one(client: Client) -> None:
    """A's mark passed its deadline (A stalled or died between its lowerings): B marks at its first try, and A's
    clear, coming late, deletes nothing of B's."""
    assert await lowering.mark(client, TOPIC, LOWERED, "run-a", bound_ms=200) is None
    await _past(client, _deadline(await _marks(client)))
    assert await lowering.mark(client, TOPIC, LOWERED, "run-b") is None
    held_b = await _marks(client)
    assert held_b[1].startswith(b"run-b ")
    await lowering.clear(client, TOPIC, LOWERED, "run-a")
    assert await _marks(client) == held_b, "A's clear deleted B's mark"
    await lowering.clear(client, TOPIC, LOWERED, "run-b")
    assert await _marks(client) == [None, None]


async def test_an_older_versions_bare_mark_blocks_every_partition_and_is_never_deleted(client: Client) -> None:
    """An older version marks ``<p>:restoring`` alone. Live, it refuses a marking that names its partition (the
    holder named as an older version's run), and none of the partitions named is lowered or marked (checked
    first, written after); a clear of another run leaves it; once it passed, B marks."""
    ckpt = keys.checkpoint_key(TOPIC)
    old = await _redis_ms(client) + 60_000
    await client.hset(ckpt, mapping={"0": 20, "1": 20, keys.restoring_field(1): old})
    before = await client.hgetall(ckpt)
    both = [*LOWERED, "1", 9, 0]
    refused = await lowering.mark(client, TOPIC, both, "run-b")
    assert refused == lowering.Holder("1", "", old)
    assert "older hotboard version" in str(refused)
    assert await client.hgetall(ckpt) == before, "a refused marking lowered, bumped or marked a partition"
    await lowering.clear(client, TOPIC, both, "run-b")
    assert await _marks(client, 1) == [str(old).encode(), None], "a clear deleted a mark it does not hold"
    soon = await _redis_ms(client) + 200
    await client.hset(ckpt, keys.restoring_field(1), soon)
    await _past(client, soon)
    assert await lowering.mark(client, TOPIC, both, "run-b") is None


async def test_an_older_versions_mark_set_over_a_named_one_blocks_even_its_named_holder(client: Client) -> None:
    """Mixed versions: run A marks (both fields), an older version marks over it (the bare deadline alone). A
    marking again (a retry) must not take the older run's mark for its own, and A's clear leaves it."""
    assert await lowering.mark(client, TOPIC, LOWERED, "run-a") is None
    old = await _redis_ms(client) + 60_000
    await client.hset(keys.checkpoint_key(TOPIC), keys.restoring_field(0), old)
    refused = await lowering.mark(client, TOPIC, LOWERED, "run-a")
    assert refused is not None and refused.run == "" and refused.deadline_ms == old
    await lowering.clear(client, TOPIC, LOWERED, "run-a")
    assert await _marks(client) == [str(old).encode(), None]


async def test_a_run_waiting_past_its_bound_gives_up_naming_the_holder(client: Client) -> None:
    """B waits (retrying with backoff) while A holds; past its wait it raises RestoreBusy: a TimeoutError, which
    the commands exit 3 on and a worker's own restore (archive.redis_loss) retries at its next look."""
    assert await lowering.mark(client, TOPIC, LOWERED, "run-a") is None
    started = time.monotonic()
    with pytest.raises(lowering.RestoreBusy) as busy:
        await lowering.hold(client, TOPIC, LOWERED, "run-b", wait_s=0.3)
    assert time.monotonic() - started >= 0.3
    assert busy.value.holder.run == "run-a" and "run run-a" in str(busy.value)
    assert isinstance(busy.value, TimeoutError) and isinstance(busy.value, TRANSIENT)
    assert (await _marks(client))[1].startswith(b"run-a ")


async def test_a_waiting_run_marks_as_soon_as_the_holder_clears(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's hold, started while A holds, is refused and tries again; it returns once A cleared, with B's mark."""
    assert await lowering.mark(client, TOPIC, LOWERED, "run-a") is None
    refusals = _count_refusals(monkeypatch)
    waiting = asyncio.create_task(lowering.hold(client, TOPIC, LOWERED, "run-b", wait_s=30))
    await _until(lambda: len(refusals) >= 2 or waiting.done(), "B refused and retrying")
    assert not waiting.done() and {r.run for r in refusals} == {"run-a"}
    await lowering.clear(client, TOPIC, LOWERED, "run-a")
    await asyncio.wait_for(waiting, 10)
    assert (await _marks(client))[1].startswith(b"run-b ")


async def test_the_checkpoint_script_holds_on_either_field_and_deletes_both_past_the_deadline(
    client: Client,
) -> None:
    """The worker's checkpoint move is refused while ``<p>:restoring`` or ``<p>:restoring_by`` is live (the named
    one alone: an older version's clear deleted the bare deadline under a newer run's mark); once the deadline
    passed, the move goes through and deletes both fields."""
    ckpt = keys.checkpoint_key(TOPIC)
    sink = CheckpointHash(client, TOPIC)
    await client.hset(ckpt, "0", 9)
    assert await lowering.mark(client, TOPIC, LOWERED, "run-a", bound_ms=60_000) is None
    assert await sink.load_checkpoints([0]) == {0: 9}
    for drop in (keys.restoring_field(0), keys.restoring_by_field(0)):
        held = await _marks(client)
        await client.hdel(ckpt, drop)
        [move] = await sink.advance_checkpoints({0: (9, 12)})
        assert not move.ok, f"a move went through with only {drop!r} gone"
        await client.hset(ckpt, mapping=dict(zip(keys_of(0), held, strict=True)))
    await lowering.clear(client, TOPIC, LOWERED, "run-a")
    assert await lowering.mark(client, TOPIC, LOWERED, "run-b", bound_ms=200) is None
    assert await sink.load_checkpoints([0]) == {0: 9}
    [refused] = await sink.advance_checkpoints({0: (9, 12)})
    assert not refused.ok
    await _past(client, _deadline(await _marks(client)))
    [moved] = await sink.advance_checkpoints({0: (9, 12)})
    assert moved.ok
    assert await _marks(client) == [None, None], "the move past the deadline left a field of the mark"


def keys_of(partition: int) -> list[str]:
    return [keys.restoring_field(partition), keys.restoring_by_field(partition)]


async def test_a_lost_reply_of_the_marking_lowering_still_clears_its_own_mark_on_the_cluster(
    redis_cluster: TestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marking lowering ran and its reply was lost: the swap is not attempted, and the ``finally`` clear
    deletes the mark (both fields), since it names this run."""
    real = lowering._LOWER

    async def reply_lost(redis: Client, keys_: list[str], args: list[Any]) -> Any:
        reply = await real(redis, keys_, args)
        if args[0] == "mark":
            raise ConnectionError("the marking lowering ran, its reply was lost")
        return reply

    monkeypatch.setattr(lowering, "_LOWER", reply_lost)
    client = redis_client.connect(redis_cluster.seed, cluster=True)
    try:
        live, run = staging.live_keys("a"), staging.run_token()
        with pytest.raises(ConnectionError):
            await staging.swap(client, TOPIC, live, staging.staging_keys(live, run), [-1, 0], LOWERED, run)
        assert await _marks(client) == [None, None]
        assert await client.hget(keys.checkpoint_key(TOPIC), "0") == b"9", "both lowerings ran"
    finally:
        await client.aclose()


def test_restore_busy_through_the_cli_is_exit_3_in_one_line_naming_the_holder(
    redis_cluster: TestCluster, postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hotboard restore --redis-cluster`` while another run holds the mark past the wait: exit 3 (retry later),
    one line on stderr naming the run holding it."""

    async def held() -> None:
        await _archive_boards(postgres_url, ["a"])
        client = redis_client.connect(redis_cluster.seed, cluster=True)
        try:
            assert await lowering.mark(client, TOPIC, LOWERED, "0ther0ne") is None
        finally:
            await client.aclose()

    asyncio.run(held())
    monkeypatch.setattr(lowering, "MARK_WAIT_S", 0.3)
    argv = ["restore", "--board", "a", "--postgres", postgres_url, "--topic", TOPIC]
    assert hotboard([*argv, "--redis", redis_cluster.seed, "--redis-cluster"]) == 3
    _, err = capsys.readouterr()
    failed = [line for line in err.splitlines() if line.startswith("hotboard restore: ")]  # beside the progress
    assert len(failed) == 1 and failed[0].startswith("hotboard restore: restore busy on topic scores: "), err
    assert "partition 0 is marked restoring by run 0ther0ne" in failed[0], err


async def test_a_workers_busy_restore_on_a_loss_is_tried_again_until_it_completes(
    redis_cluster: TestCluster, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a FLUSHALL partition 0 is halted ``redis_lost``, and a dead run's mark is live (killed between its
    lowerings). The worker's own restore waits its bound and gives up (RestoreBusy). Its first lowering already
    wrote the archive's checkpoint, which lifts the halt at the worker's next look: the retry must not wait for a
    halt that is gone (the review's case: board ``a`` never restored). Ticks with nothing halted retry it until
    the dead mark passes, and then board ``a`` is restored, once."""
    await _archive_boards(postgres_url, ["a"])
    client = redis_client.connect(redis_cluster.seed, cluster=True)
    try:
        ckpt = keys.checkpoint_key(TOPIC)
        await CheckpointHash(client, TOPIC).record_halt(0, HaltReason.REDIS_LOST.value)
        dead = await _redis_ms(client) + 1_500
        await client.hset(ckpt, mapping={keys.restoring_field(0): dead, keys.restoring_by_field(0): f"deadrun {dead}"})
        monkeypatch.setattr(lowering, "MARK_WAIT_S", 0.3)
        settings = worker_settings(
            "127.0.0.1:1", redis_cluster.seed, TOPIC, "g", postgres=postgres_url, halt_recheck_s=0.05
        )
        restorer = LossRestorer(settings, client)
        halted = {0: Halt(HaltReason.REDIS_LOST, "lost")}
        restorer.note(halted)
        deadline = time.monotonic() + 30
        while restorer.restores == 0:
            assert time.monotonic() < deadline, "the busy restore was never tried again"
            restorer.note({})  # the halt lifted: the checkpoint was written by the first lowering
            await asyncio.sleep(0.02)
        assert await client.zcard(keys.board_key("a")) == 5, "board a restored"
        assert await _marks(client) == [None, None]
        restorer.note(halted)  # restored once: a partition halting again stays halted for an operator
        assert restorer._task is not None and restorer._task.done()
        await restorer.close()
    finally:
        await client.aclose()
