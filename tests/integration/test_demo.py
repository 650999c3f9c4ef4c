"""``hotboard demo`` as a terminal runs it: every port on loopback, the export line printed, and a Ctrl-C sent
to the whole foreground process group (as a terminal sends it) drains the workers. Afterwards the demo's Redis,
reopened from its append-only file, holds exactly the events the workers' checkpoints say were applied,
recomputed from the load generator's seed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from aiokafka.partitioner import DefaultPartitioner

from cli.devstack import RedisServer
from cli.loadgen import board_names, generate
from cli.process import LOOPBACK, bind_error, free_port, port_open
from hotboard import keys
from tests.integration.harness import Totals, read_boards, totals_of

pytestmark = pytest.mark.integration

PLAYERS, BOARDS, PARTITIONS = 500, 3, 8


def listeners(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net shows them) of the sockets listening on ``port``, IPv4 and IPv6."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def applied_events(checkpoints: dict[int, int]) -> Totals:
    """The reference: the producer's events (seed 0) up to each partition's checkpoint, routed as it routes."""
    partitions = list(range(PARTITIONS))
    partitioner = DefaultPartitioner()
    wanted = {p: checkpoints.get(p, -1) + 1 for p in partitions}
    seen = dict.fromkeys(partitions, 0)
    kept = []
    for n, event in enumerate(generate(10**9, players=PLAYERS, boards=BOARDS)):
        p = partitioner(event.player.encode(), partitions, partitions)
        if seen[p] < wanted[p]:
            kept.append(event)
        seen[p] += 1
        if all(seen[q] >= wanted[q] for q in partitions):
            return totals_of(kept)
        assert n < 100 * (sum(wanted.values()) + 1000), "the checkpoints are beyond what the producer could send"
    raise AssertionError("unreachable")


def _bindable_block(n: int) -> int:
    """The first of ``n`` consecutive ports that can all be bound now, below Linux's ephemeral range (32768 on):
    the demo binds the second worker's and the API's metrics ports (+1, +2) only after its Kafka and Redis
    clients opened connections, and an ephemeral port can be any client's source port by then."""
    rng = random.Random(os.getpid())
    for _ in range(200):
        base = rng.randrange(20_000, 32_000 - n)
        if all(bind_error(LOOPBACK, port) is None for port in range(base, base + n)):
            return base
    raise AssertionError(f"no {n} consecutive free ports below 32000")


def test_ctrl_c_in_a_terminal_drains_the_workers_and_the_boards_hold_what_was_applied(tmp_path: Path) -> None:
    base = _bindable_block(6)  # below the ephemeral range: no outgoing connection takes one meanwhile
    names = ("kafka", "redis", "api", "metrics", "metrics2", "api-metrics")
    ports = dict(zip(names, range(base, base + 6), strict=True))
    data = tmp_path / "demo"
    command = [sys.executable, "-m", "cli.main", "demo", "--rate", "1500", "--players", str(PLAYERS)]
    command += ["--boards", str(BOARDS), "--data-dir", str(data)]
    for name in ("kafka", "redis", "api", "metrics"):
        command += [f"--{name}-port", str(ports[name])]
    # A session of its own, as a shell gives a foreground job: its process group is what Ctrl-C signals.
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = redis.Redis(port=ports["redis"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and demo.poll() is None:
            try:
                if int(client.zcard(keys.board_key("global"))) >= 100:
                    break
            except redis.ConnectionError:
                pass
            time.sleep(0.5)
        client.close()
        assert demo.poll() is None, demo.communicate()[0].decode()[-3000:]
        addresses = {name: listeners(port) for name, port in ports.items()}
        assert addresses == {name: {"0100007F"} for name in ports}, addresses  # 127.0.0.1, nothing else
        os.killpg(demo.pid, signal.SIGINT)
        out = demo.communicate(timeout=60)[0].decode()
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 0, out[-3000:]
    assert "every process exited cleanly" in out and "second stop request" not in out, out[-3000:]
    export = f"export HOTBOARD_KAFKA=127.0.0.1:{ports['kafka']} HOTBOARD_REDIS=redis://127.0.0.1:{ports['redis']}/0"
    assert export in out
    assert not [name for name, port in ports.items() if port_open(port)], "still listening after Ctrl-C"

    server = RedisServer(free_port(), data)
    server.start()
    try:
        stored = redis.Redis.from_url(server.url).hgetall(keys.checkpoint_key("scores"))
        checkpoints = {int(p): int(offset) for p, offset in stored.items() if p.isdigit()}  # halts, epochs aside
        assert len(checkpoints) == PARTITIONS and sum(checkpoints.values()) > 100, checkpoints
        assert read_boards(server.url, board_names(BOARDS)) == applied_events(checkpoints)
    finally:
        server.stop()
