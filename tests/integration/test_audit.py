"""``hotboard audit`` against a running worker and archiver: 0 differences on exact boards while events still
flow (the events between Redis's and the archive's watermarks read back from Kafka), and the one player corrupted
on purpose (a ZINCRBY behind the worker's back) named with its board."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import redis

from archive.pool import Archive
from cli.devstack import RedisServer
from hotboard import keys
from hotboard.boards import DEFAULT, BoardDef
from hotboard.codec import Event
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.faults import TcpProxy
from tests.integration.harness import Feeder, declare_boards, skewed_events, totals_of, wait_exact

pytestmark = pytest.mark.integration

#: board-1 ranks equal scores by who reached them first (tie times audited); board-2 gets sets among its incrs.
DEFINITIONS = {"board-1": BoardDef(ties="earliest")}


def mixed(events: list[Event]) -> list[Event]:
    out = []
    for i, e in enumerate(events):
        if e.board == "board-2" and i % 11 == 0:
            e = e._replace(op="set", score=(e.delta or 0) * 3, delta=None)
        out.append(e._replace(meta=orjson.dumps({"n": i})) if i % 5 == 0 else e)
    return out


def run_audit(
    kafka: str, redis_url: str, postgres_url: str, topic: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "audit", "--postgres", postgres_url, *args],
        env={"HOTBOARD_REDIS": redis_url, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": kafka},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_audit_is_clean_under_load_and_names_a_corrupted_player(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    topic = topic_factory(4)
    declare_boards(redis_server.url, DEFINITIONS)
    events = mixed(skewed_events(40_000))
    head, tail = events[:10_000], events[10_000:]
    worker = spawn(redis_server.url, topic, "worker")
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, head, rate=10_000).finish()
        archiver.wait_metric("hotboard_windows_total", 1, result="flushed")
        feeder = Feeder(kafka, topic, tail, rate=2_000)
        feeder.start()
        archiver.wait_metric(
            "hotboard_windows_total", archiver.metric("hotboard_windows_total", result="flushed") + 1, result="flushed"
        )
        # The archive behind Redis by construction: the archiver frozen while the worker applies more windows
        # (a fast machine lets it catch up between windows otherwise, and the audit would read nothing between).
        archiver.signal(signal.SIGSTOP)
        try:
            flushed = worker.metric("hotboard_windows_total", result="flushed")
            worker.wait_metric("hotboard_windows_total", flushed + 2, result="flushed")
            during = run_audit(kafka, redis_server.url, postgres_url, topic)
        finally:
            archiver.signal(signal.SIGCONT)
        assert feeder.is_alive(), "the audit must run while events flow"
        assert during.returncode == 0, during.stdout + during.stderr
        assert "events in between" in during.stdout and "0 boards not exact" in during.stdout, during.stdout
        assert any(
            int(line.split(" events in between")[0].rsplit(" ", 1)[1]) > 0
            for line in during.stdout.splitlines()
            if " events in between" in line
        ), f"the archive was never behind Redis: the test proves nothing\n{during.stdout}"
        feeder.finish()
        expected = {b: t for b, t in totals_of(events).items() if b == "global"}
        wait_exact(redis_server.url, expected)
        wait_archived(postgres_url, expected)

        r = redis.Redis.from_url(redis_server.url)
        first = r.zrange(keys.board_key("global"), 0, 0)[0]
        assert isinstance(first, bytes)
        victim = first.decode()
        r.zincrby(keys.board_key("global"), 1, victim)
        r.close()
        after = run_audit(kafka, redis_server.url, postgres_url, topic)
        assert after.returncode == 1, after.stdout + after.stderr
        differs = [line for line in after.stdout.splitlines() if line.startswith("DIFFERS")]
        assert len(differs) == 1 and f"board=global player={victim} " in differs[0], after.stdout
    finally:
        archiver.cleanup()


#: Players of the large board: its Redis snapshot (one MULTI) is a reply of several MiB, stalled past
#: ``STALL_AFTER`` bytes by the proxy for ``STALL_S``, several times ``SHORT_S``; the audit's other replies are a
#: few KiB, so only the snapshot read is delayed, whatever the machine's speed.
LARGE = 50_000
STALL_AFTER = 256 << 10
STALL_S = 3.0
SHORT_S = "1.0"


async def _fill_archive(url: str, topic: str, board: str, players: int) -> None:
    """The archive holds ``board`` (every 10th player with metadata), watermarks and checkpoints, filled by COPY."""
    async with Archive(url) as archive, archive.connection() as conn:
        await conn.execute(
            "INSERT INTO hb_boards (board, spec, version, as_of_ms) VALUES ($1, $2, 1, 0)", board, DEFAULT.spec
        )
        rows = [
            (board, f"p-{i}", i * 7919 % 1_000_003, None, b'{"n":1}' if i % 10 == 0 else None) for i in range(players)
        ]
        await conn.copy_records_to_table(
            "hb_scores", records=rows, columns=("board", "player", "score", "tie_ms", "meta")
        )
        for p in range(2):
            await conn.execute("INSERT INTO hb_watermarks VALUES ($1, $2, 7)", board, keys.watermark_field(topic, p))
            await conn.execute("INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ($1, $2, 7)", topic, p)


def test_a_large_board_is_audited_with_the_short_default_timeouts(
    kafka: str, topic_factory: Callable[..., str], redis_url: str, postgres_url: str
) -> None:
    """The snapshot reads have a timeout of their own (``--snapshot-timeout-s``): with the board's Redis snapshot
    stalled (a proxy holds its reply past the first 256 KiB) for three times the Redis timeout, the audit still
    proves it exact; the same audit with the snapshot timeout as short fails in one line (exit 3)."""
    topic = topic_factory(2)
    asyncio.run(_fill_archive(postgres_url, topic, "large", LARGE))
    restored = subprocess.run(
        [sys.executable, "-m", "cli.main", "restore", "--board", "large", "--postgres", postgres_url],
        env={"HOTBOARD_REDIS": redis_url, "HOTBOARD_TOPIC": topic},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restored.returncode == 0, restored.stderr
    with TcpProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0])) as proxy:
        proxy.stall_large_replies(STALL_AFTER, STALL_S)
        short = ("--board", "large", "--redis-timeout-s", SHORT_S, "--postgres-timeout-s", SHORT_S)
        done = run_audit(kafka, proxy.url, postgres_url, topic, *short)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"board large: {LARGE} players, 0 events in between, exact" in done.stdout, done.stdout
        cut = run_audit(kafka, proxy.url, postgres_url, topic, *short, "--snapshot-timeout-s", SHORT_S)
    assert cut.returncode == 3, cut.stdout + cut.stderr
    assert len(cut.stderr.splitlines()) == 1 and cut.stderr.startswith("hotboard audit: "), cut.stderr
