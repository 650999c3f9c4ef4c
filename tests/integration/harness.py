"""Test harness for the worker fleet: worker processes we can kill, stop and freeze; a background feeder of
events; the independent reference totals every board must equal; and an in-process worker for tests that
reach into it."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from cli.devstack import free_port
from cli.loadgen import PublishStats, generate, publish
from cli.process import spawn, stop_process
from hotboard import keys
from hotboard.boards import BoardDef
from hotboard.codec import Event, encode
from hotboard.records import PlacedRecord
from ingest.settings import WorkerSettings
from ingest.worker import Worker

Totals = dict[str, dict[str, int]]


def totals_of(events: Iterable[Event], seasons: dict[str, BoardDef] | None = None) -> Totals:
    """The reference: each board's exact per-player sum, computed without any hotboard code path; events of
    the seasonal boards in ``seasons`` count in the period board of their event time (``B@<id>``)."""
    out: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in events:
        board = e.board
        definition = (seasons or {}).get(board)
        if definition is not None and e.ts_ms is not None:
            board = f"{board}@{definition.schedule.period_of(e.ts_ms).id}"
        out[board][e.player] += e.delta or 0
    return {b: dict(d) for b, d in out.items()}


#: The seasonal boards of the core's exactness tests: two weekly per-region boards (grace long enough that the
#: events either side of this week's start all count), beside ``global``, which never resets.
WEEKLY = BoardDef(reset="weekly", keep=4, grace_ms=8 * 86_400_000)
SEASONS = {"board-1": WEEKLY, "board-2": WEEKLY}


def declare_boards(url: str, definitions: Mapping[str, BoardDef], cluster: bool = False) -> None:
    """Declare each board with its definition (``hotboard boards create``), from a test's own thread."""
    from hotboard import board_store
    from hotboard.redis_client import connect

    async def declare() -> None:
        client = connect(url, cluster=cluster)
        try:
            for board, definition in definitions.items():
                await board_store.declare(client, board, definition)
        finally:
            await client.aclose()

    asyncio.run(declare())


def seasonal_mix(url: str, events: Sequence[Event], seed: int = 0) -> tuple[list[Event], Totals]:
    """``events`` with ``board-1`` and ``board-2`` declared weekly and their event times spread over the hour
    either side of this week's start (a replay crosses the period boundary), and the reference totals."""
    declare_boards(url, SEASONS)
    start = WEEKLY.schedule.period_of(int(time.time() * 1000)).start_ms
    rng = random.Random(seed)
    mixed = [e._replace(ts_ms=start + rng.randint(-3_600_000, 3_600_000)) if e.board in SEASONS else e for e in events]
    totals = totals_of(mixed, SEASONS)
    assert sum(1 for b in totals if "@" in b) == 4, "both weeks of both seasonal boards"
    return mixed, totals


#: Definition hashes hotboard never writes (a foreign writer, a hand-made HSET): board -> fields, or a string
#: where the hash belongs.
JUNK_DEFINITIONS: dict[str, dict[str, bytes] | bytes] = {
    "junk-utf8": {"spec": b"desc/incr/shared", "order": b"d\xffsc"},
    "junk-spec": {"spec": b"desc/incr/shared|weekly|4|6\xfe"},
    "junk-keep": {"spec": "desc/incr/shared|weekly|\u00b2|60000".encode()},
    "junk-type": b"not a hash",
}


def seed_junk_definitions(url: str) -> None:
    """Store every one of :data:`JUNK_DEFINITIONS` at its board's ``hb:{B}:def``, as a foreign writer would."""
    r = redis.Redis.from_url(url)
    try:
        for board, junk in JUNK_DEFINITIONS.items():
            if isinstance(junk, bytes):
                r.set(keys.def_key(board), junk)
            else:
                for field, value in junk.items():
                    r.hset(keys.def_key(board), field, value)
    finally:
        r.close()


def read_boards(url: str, boards: Iterable[str]) -> Totals:
    r = redis.Redis.from_url(url)
    try:
        return {board: board_totals(r, board) for board in boards}
    finally:
        r.close()


def board_totals(r: Any, board: str) -> dict[str, int]:
    """player -> score of a board whose members are the player ids (every board but ``earliest`` ones)."""
    rows = cast("list[tuple[bytes, float]]", r.zrange(keys.board_key(board), 0, -1, withscores=True))
    return {m.decode(): int(s) for m, s in rows}


def diff(expected: Totals, actual: Totals, limit: int = 5) -> str:
    lines = []
    for board, want in expected.items():
        got = actual.get(board, {})
        bad = [(p, want.get(p), got.get(p)) for p in set(want) | set(got) if want.get(p) != got.get(p)]
        if bad:
            lines.append(f"{board}: {len(bad)} players differ, e.g. {sorted(bad, key=str)[:limit]}")
    return "; ".join(lines) or "equal"


def wait_exact(
    url: str, expected: Totals, timeout_s: float = 60.0, read: Callable[[str, Iterable[str]], Totals] = read_boards
) -> Totals:
    """Poll until every board equals the reference (as ``read`` reads it); fail with the difference after the
    deadline."""
    deadline = time.monotonic() + timeout_s
    actual: Totals = {}
    while time.monotonic() < deadline:
        actual = read(url, expected)
        if actual == expected:
            # Stable? A double count would show up as a later overshoot: look once more after a window.
            time.sleep(1.5)
            actual = read(url, expected)
            if actual == expected:
                return actual
        time.sleep(0.25)
    raise AssertionError(f"boards not exact after {timeout_s:.0f}s: {diff(expected, actual)}")


def wait_for(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Poll ``check`` until it holds twice, a window apart (a double count would show as a later overshoot)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            time.sleep(1.5)
            if check():
                return
        time.sleep(0.25)
    raise AssertionError(f"not reached within {timeout_s:.0f}s: {what}")


class WorkerProcess:
    """``hotboard worker`` as a real OS process, so tests can SIGKILL, SIGSTOP and SIGTERM it."""

    def __init__(
        self,
        *,
        kafka: str,
        redis_url: str,
        topic: str,
        group: str,
        log_dir: Path,
        name: str,
        window_ms: int = 500,
        extra_env: dict[str, str] | None = None,
        command: str = "worker",
        module: str = "cli.main",
    ) -> None:
        self.name = name
        self.command = command
        #: What runs: ``python -m <module> <command>`` (a test's wrapper module takes no command: "").
        self.module = module
        self.log_path = log_dir / f"{name}.log"
        self.metrics_port = free_port()
        self.env = {
            **os.environ,
            "HOTBOARD_KAFKA": kafka,
            "HOTBOARD_REDIS": redis_url,
            "HOTBOARD_TOPIC": topic,
            "HOTBOARD_GROUP": group,
            "HOTBOARD_WINDOW_MS": str(window_ms),
            "HOTBOARD_METRICS_PORT": str(self.metrics_port),
            "HOTBOARD_METRICS_HOST": "127.0.0.1",
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
            "HOTBOARD_LOG_LEVEL": "INFO",
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
        argv = [sys.executable, "-m", self.module, *([self.command] if self.command else [])]
        self.proc = spawn(argv, self.log_path, env=self.env)
        self.starts += 1
        return self

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)

    def terminate(self, timeout_s: float = 10.0) -> tuple[int, float]:
        """SIGTERM; returns (exit code, seconds it took)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout_s + 5)
        return rc, time.monotonic() - started

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def status(self, path: str) -> int:
        """HTTP status of the worker's ops endpoint at ``path`` (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the worker's /metrics (0.0 when absent or the worker does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0

    def wait_metric(self, name: str, at_least: float, timeout_s: float = 60.0, **labels: str) -> float:
        deadline = time.monotonic() + timeout_s
        value = 0.0
        while time.monotonic() < deadline:
            value = self.metric(name, **labels)
            if value >= at_least:
                return value
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: {name}{labels} = {value}, wanted >= {at_least} within {timeout_s:.0f}s")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status("/readyz") == 200:
                return
            assert self.proc is not None and self.proc.poll() is None, f"{self.name} exited:\n{self.log()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready within {timeout_s:.0f}s:\n{self.log()[-3000:]}")

    def cleanup(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 0.0, signal.SIGKILL)


class Feeder(threading.Thread):
    """Publishes a fixed list of events at a bounded rate in the background (its own event loop). With
    ``max_s`` it also stops ``max_s`` seconds after it started, and :meth:`stop` ends it early: a test that must
    act while events flow gives it more events than it needs, stops it once it acted, and counts what it sent
    (``finish().events``, a prefix of ``events``)."""

    def __init__(
        self,
        kafka: str,
        topic: str,
        events: Sequence[Event] | Sequence[tuple[bytes, bytes]],
        rate: float,
        *,
        max_s: float | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.events, self.rate, self.max_s = kafka, topic, events, rate, max_s
        self.stats: PublishStats | None = None
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        """Send no event after the one in hand; :meth:`finish` then returns how many were sent."""
        self._halt.set()

    def _until_stopped(self) -> Iterator[Event | tuple[bytes, bytes]]:
        deadline = None if self.max_s is None else time.monotonic() + self.max_s
        for item in self.events:
            if self._halt.is_set() or (deadline is not None and time.monotonic() > deadline):
                return
            yield item

    def run(self) -> None:
        events = cast("Iterable[Event]", self._until_stopped())  # one kind or the other, as given
        try:
            self.stats = asyncio.run(publish(self.kafka, self.topic, events, rate=self.rate))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread by finish()
            self.error = exc

    def finish(self, timeout_s: float = 120.0) -> PublishStats:
        if not self.is_alive() and self.stats is None and self.error is None:
            self.start()
        self.join(timeout_s)
        assert not self.is_alive(), "feeder did not finish in time"
        if self.error is not None:
            raise self.error
        assert self.stats is not None
        return self.stats


def kill_while_feeding(
    victim: WorkerProcess, feeder: Feeder, times: int, ready: Callable[[], None] | None = None
) -> None:
    """SIGKILL ``victim`` ``times`` times, each once it flushes with pending work (and ``ready()`` returned),
    restarting it each time; every kill must land while ``feeder`` still publishes."""
    for _ in range(times):
        victim.wait_ready()
        victim.wait_metric("hotboard_windows_total", 1, result="flushed")
        if ready is not None:
            ready()
        assert feeder.is_alive(), "the events ran out before the kills: the test would prove nothing"
        victim.kill()
        victim.start()


def skewed_events(count: int, *, players: int = 5000, boards: int = 3, seed: int = 1) -> list[Event]:
    return list(generate(count, players=players, zipf=1.1, boards=boards, seed=seed))


def wait_flushing(url: str, board: str = "global", windows: int = 2, timeout_s: float = 30.0) -> None:
    """Block until ``board`` has taken ``windows`` flushes: the fleet is positioned and writing."""
    r = redis.Redis.from_url(url)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            version = r.hget(keys.meta_key(board), keys.META_VERSION)
            if version is not None and int(version) >= windows:
                return
            time.sleep(0.1)
    finally:
        r.close()
    raise AssertionError(f"board {board} saw fewer than {windows} flushes within {timeout_s:.0f}s")


def zincrby_calls(url: str) -> int:
    r = redis.Redis.from_url(url)
    try:
        stats = r.info("commandstats").get("cmdstat_zincrby", {})
        return int(stats.get("calls", 0))
    finally:
        r.close()


# ---------------------------------------------------------------- an in-process worker


def worker_events(board: str, players: int, count: int, start: int = 0) -> list[Event]:
    """``count`` events on ``board`` spread over ``players`` players, amounts 1..5."""
    return [Event(board, f"{board}-p{(start + i) % players}", 1 + (start + i) % 5, None) for i in range(count)]


def worker_settings(kafka: str, redis_url: str, topic: str, group: str, **kw: Any) -> WorkerSettings:
    """An in-process worker's settings: short windows and the session timeout the embedded broker needs."""
    base: dict[str, Any] = {
        "kafka": kafka,
        "redis": redis_url,
        "topic": topic,
        "group": group,
        "window_ms": 200,
        "metrics_port": 0,
        "session_timeout_ms": 6000,
    }
    return WorkerSettings(**{**base, **kw})


async def wait_while_running(
    check: Callable[[], bool], task: asyncio.Task[None], what: str, timeout_s: float = 60.0
) -> None:
    """Poll ``check`` until it holds; the worker task ending first is a failure with its own error."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if task.done():
            task.result()
            raise AssertionError(f"worker stopped before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def run_worker(
    settings: WorkerSettings,
    until: Callable[[Worker], bool],
    what: str,
    patch: Callable[[Worker], Awaitable[None]] | None = None,
) -> Worker:
    """An in-process worker until ``until(worker)`` holds; then a clean stop."""
    async with Worker(settings, handle_signals=False) as worker:
        if patch is not None:
            await patch(worker)
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(lambda: until(worker), task, what)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    return worker


def sample(worker: Worker, name: str, **labels: str) -> float:
    """One metric of an in-process worker (0 before its first increment)."""
    return worker.metrics.registry.get_sample_value(name, labels) or 0.0


async def log_starts_at(worker: Worker, start: int) -> None:
    """Retention, simulated: the embedded broker has no DeleteRecords, so the worker is told the log starts
    later than 0 (what a real Kafka answers after retention or DeleteRecords)."""
    real = worker._consumer.beginning_offsets

    async def beginning_offsets(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: max(o, start) for tp, o in (await real(tps)).items()}

    worker._consumer.beginning_offsets = beginning_offsets


async def read_topic(
    kafka: str, topic: str, expected: int, timeout_s: float = 30.0, security: Mapping[str, Any] | None = None
) -> list[PlacedRecord]:
    """Up to ``expected`` records of every partition of ``topic`` (a DLQ, say), from the beginning; ``security``
    is :func:`hotboard.kafka_security.client_kwargs`."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka, auto_offset_reset="earliest", group_id=None, **(security or {})
    )
    await consumer.start()
    out: list[PlacedRecord] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for recs in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(recs)
    finally:
        await consumer.stop()
    return out


def checkpoint(url: str, topic: str, partition: int = 0) -> int | None:
    """The checkpoint Redis holds for ``partition`` of ``topic`` (the last offset applied), if any."""
    value = redis.Redis.from_url(url).hget(keys.checkpoint_key(topic), str(partition))
    return None if value is None else int(cast("bytes", value))


def produce(kafka: str, topic: str, events: Sequence[Event], codec: str, partition: int | None = None) -> None:
    """``events`` through librdkafka with ``compression.type`` = ``codec``, keyed by player, each with headers
    (librdkafka batches them: the compressed batches hold many records)."""
    producer = Producer(
        {
            "bootstrap.servers": kafka,
            "compression.type": codec,
            "linger.ms": 50,
            "enable.idempotence": False,
            "acks": "all",
        }
    )
    failures: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for i, e in enumerate(events):
        headers: list[tuple[str, str | bytes | None]] = [
            ("trace-id", f"t-{i}".encode()),
            ("codec", codec),
            ("empty", b""),
        ]
        if partition is None:
            producer.produce(topic, encode(e), e.player.encode(), headers=headers, on_delivery=delivered)
        else:
            producer.produce(topic, encode(e), e.player.encode(), partition, headers=headers, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "librdkafka did not deliver everything"
    assert not failures, failures[:3]
