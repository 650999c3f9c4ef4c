"""``hotboard boards delete`` and ``erase`` with ``--postgres``: the archive removes what Redis removes, at the
same delete point, while workers and archivers run; an erase waits for both, or erases nothing anywhere."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
import redis

from cli.devstack import RedisServer
from cli.loadgen import publish
from hotboard import keys
from hotboard.codec import Event
from tests.integration.archive_harness import archive_totals, archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, totals_of, wait_exact, wait_flushing, wait_for
from tests.integration.test_removal import PARTITIONS, hotboard, mixed, topic_totals

pytestmark = pytest.mark.integration


def _board_row(url: str, board: str) -> tuple[int | None, dict[str, int]]:
    """The archive's version of ``board`` (None: no row) and its watermarks."""

    async def read() -> tuple[int | None, dict[str, int]]:
        conn = await asyncpg.connect(url)
        try:
            version = await conn.fetchval("SELECT version FROM hb_boards WHERE board = $1", board)
            marks = await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
            return version, {r["field"]: r["last_offset"] for r in marks}
        finally:
            await conn.close()

    return asyncio.run(read())


def test_delete_while_events_flow_keeps_only_later_events_in_redis_and_the_archive(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    """Archiver windows holding events of the board when it is deleted are fenced and resynchronise: the archive
    ends with exactly the events after the delete point, as Redis does, and the board's version goes on."""
    topic = topic_factory(PARTITIONS)
    events = mixed(("doomed", "kept"), 8000, seed=11)
    worker = spawn(redis_server.url, topic)
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        feeder = Feeder(kafka, topic, events, rate=1500)
        feeder.start()
        wait_flushing(redis_server.url, "doomed", windows=3)
        # the archive holds some of the board before the delete (else the delete would find nothing of it there)
        wait_for(lambda: bool(archive_totals(postgres_url, ["doomed"])["doomed"]), timeout_s=30, what="archived")
        assert feeder.is_alive(), "the events ran out before the delete: the test would prove nothing"
        done = hotboard("boards", "delete", "doomed", "--json", "--postgres", postgres_url, env_of=worker)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        point = {int(p): o for p, o in answer["delete_point"].items()}
        assert feeder.is_alive(), "the delete must land while events still flow"
        feeder.finish()

        def counts(e: Event, partition: int, offset: int) -> bool:
            return e.board != "doomed" or offset > point[partition]

        expected = topic_totals(kafka, topic, len(events), counts)
        assert 0 < sum(expected["doomed"].values()) < sum(e.delta or 0 for e in events if e.board == "doomed")
        wait_exact(redis_server.url, expected)
        wait_archived(postgres_url, expected)
        version, marks = _board_row(postgres_url, "doomed")
        assert version is not None and version > answer["version"], "the archive's version goes on past the delete"
        assert marks[keys.APPLIED_DELETED_VERSION] == answer["version"]
        r = redis.Redis.from_url(redis_server.url)
        try:
            assert int(r.hget(keys.applied_key("doomed"), keys.APPLIED_DELETED_VERSION) or -1) == answer["version"]
        finally:
            r.close()
    finally:
        archiver.cleanup()


def test_erase_waits_for_the_archivers_or_erases_nothing(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    topic = topic_factory(PARTITIONS)
    head = [Event("b", f"p{i}", 10 + i, None) for i in range(40)]
    tail = [Event("b", f"p{i}", 1, None) for i in range(40)]
    worker = spawn(redis_server.url, topic)
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        asyncio.run(publish(kafka, topic, head))
        wait_archived(postgres_url, totals_of(head))
        assert archiver.terminate()[0] == 0
        asyncio.run(publish(kafka, topic, tail))
        both = totals_of(head + tail)
        wait_exact(redis_server.url, both)  # Redis caught up, the archive did not
        argv = ("boards", "erase", "b", "p0", "--postgres", postgres_url)
        refused = hotboard(*argv, "--wait-s", "1", env_of=worker)
        assert refused.returncode == 3 and "archivers" in refused.stderr, refused.stderr
        assert "Nothing was erased" in refused.stderr
        wait_exact(redis_server.url, both)
        assert archive_totals(postgres_url, ["b"]) == totals_of(head), "the archive erased while behind"

        archiver.start()
        archiver.wait_ready()
        done = hotboard(*argv, "--json", env_of=worker)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["outcome"] == "erased"
        rest = {"b": {p: v for p, v in both["b"].items() if p != "p0"}}
        wait_exact(redis_server.url, rest)
        assert archive_totals(postgres_url, ["b"]) == rest
    finally:
        archiver.cleanup()
