"""A restore on a Redis Cluster waits for each board's swap to reach its master's replicas (``WAIT``, as a window
does) before it goes on: the lost checkpoints a whole restore writes at its end (on the checkpoint hash's master,
another one) lift the halts, and a board whose master then failed over to a replica lacking the swap would have
lost its restored head while a worker replays only the tail. With the board master's replica frozen (SIGSTOP), the
worker's own restore on a loss and ``hotboard restore --all`` must both stop short of those checkpoints (retried,
exit 3), and complete once the replica answers again."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from archive.redis_loss import LossRestorer
from cli.main import main as hotboard
from flusher.checkpoints import CheckpointHash
from flusher.cluster import board_slot
from hotboard import keys, redis_client
from ingest.partitions import Halt, HaltReason
from tests.cluster import TestCluster
from tests.integration.harness import worker_settings
from tests.integration.test_cluster import sync_client
from tests.integration.test_restore_mark import TOPIC, _archive_boards

pytestmark = pytest.mark.integration

BOARD = "a"
#: How long a swap's WAIT waits for the frozen replica: short, the test waits it out at every try.
ACK_TIMEOUT_MS = 300
HALTED = {0: Halt(HaltReason.REDIS_LOST, "Redis holds no checkpoint")}


@dataclass
class Frozen:
    """The board's master (``seed``: the only node the restore is told of, a frozen seed would stall the client)
    and its replica, frozen until :meth:`thaw`."""

    cluster: TestCluster
    seed: str
    master_port: int
    replica_port: int
    _frozen: bool = True

    def thaw(self) -> None:
        if self._frozen:
            proc = self.cluster.faults().servers[self.replica_port].proc
            assert proc is not None
            proc.send_signal(signal.SIGCONT)
            self._frozen = False
        self.cluster.faults().wait_healthy()

    def replica_holds(self) -> int:
        """The board's members on the replica (read there: a WAIT that returned means it has the swap)."""
        with self.cluster.faults().client(self.replica_port) as r:
            r.execute_command("READONLY")
            return int(r.zcard(keys.board_key(BOARD)))

    def checkpoint(self) -> str | None:
        """Partition 0's checkpoint, read on the checkpoint hash's master (a live node)."""
        r = sync_client(self.seed)
        try:
            got = r.hget(keys.checkpoint_key(TOPIC), "0")
            return got.decode() if isinstance(got, bytes) else got
        finally:
            r.close()


@pytest.fixture
def frozen(redis_cluster: TestCluster) -> Iterator[Frozen]:
    """The replica of board ``a``'s master frozen, on a cluster holding no checkpoint (a lost Redis)."""
    local = redis_cluster.faults()
    master = local.master_of_slot(board_slot(BOARD))
    replica = local.replica_of(master)
    proc = local.servers[replica.port].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    state = Frozen(redis_cluster, f"redis://127.0.0.1:{master.port}", master.port, replica.port)
    try:
        yield state
    finally:
        state.thaw()


async def test_a_workers_restore_writes_no_lost_checkpoint_before_the_boards_replica_holds_its_swap(
    frozen: Frozen, postgres_url: str
) -> None:
    """Partition 0 halted ``redis_lost``. The worker's restore swaps board ``a`` in on its master, whose replica
    never confirms it: the restore fails (retried after a backoff) with the partition's checkpoint unwritten, so
    the halt stands (the old code wrote it: a failover to that replica then would have lost the board's head
    while the partition resumed from the archive's checkpoint). Thawed, the retry completes: the checkpoint is
    written, and the replica holds the board."""
    await _archive_boards(postgres_url, [BOARD])
    client = redis_client.connect(frozen.seed, cluster=True)
    settings = worker_settings(
        "127.0.0.1:1",
        frozen.seed,
        TOPIC,
        "g",
        postgres=postgres_url,
        redis_cluster=True,
        halt_recheck_s=0.05,
        replica_ack_timeout_ms=ACK_TIMEOUT_MS,
    )
    restorer = LossRestorer(settings, client)
    try:
        await CheckpointHash(client, TOPIC).record_halt(0, HaltReason.REDIS_LOST.value)
        restorer.note(HALTED)
        deadline = time.monotonic() + 30
        while restorer.failures == restorer.restores == 0:
            assert time.monotonic() < deadline, "the restore never ended"
            await asyncio.sleep(0.02)
        assert restorer.restores == 0, "the lost checkpoint was written though the board's replica lacks its swap"
        assert frozen.checkpoint() is None
        assert await client.zcard(keys.board_key(BOARD)) == 5, "swapped in on the master all the same"
        await asyncio.to_thread(frozen.thaw)
        deadline = time.monotonic() + 30
        while restorer.restores == 0:
            assert time.monotonic() < deadline, "the restore was never tried again"
            restorer.note(HALTED)
            await asyncio.sleep(0.02)
        assert frozen.checkpoint() == "9"
        assert frozen.replica_holds() == 5
    finally:
        await restorer.close()
        await client.aclose()


def test_restore_all_through_the_cli_exits_3_before_the_lost_checkpoints_while_a_replica_lags(
    frozen: Frozen, postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hotboard restore --all --redis-cluster`` (``--min-replica-acks`` -1: one replica on a cluster) with the
    board's replica frozen: exit 3 (run it again), one line naming the board and the replicas, the lost checkpoint
    unwritten; thawed, the rerun exits 0 and writes it."""
    asyncio.run(_archive_boards(postgres_url, [BOARD]))
    monkeypatch.setenv("HOTBOARD_REPLICA_ACK_TIMEOUT_MS", str(ACK_TIMEOUT_MS))  # env: read by old versions too
    argv = ["restore", "--all", "--postgres", postgres_url, "--topic", TOPIC, "--redis", frozen.seed]
    assert hotboard([*argv, "--redis-cluster"]) == 3, "the restore went on without the board's replica"
    _, err = capsys.readouterr()
    failed = [line for line in err.splitlines() if line.startswith("hotboard restore: ")]  # beside the progress
    assert len(failed) == 1 and f"swap of board {keys.board_key(BOARD)} " in failed[0], err
    assert "confirmed on 0 replicas, fewer than 1 within 300 ms" in failed[0], err
    assert frozen.checkpoint() is None
    frozen.thaw()
    assert hotboard([*argv, "--redis-cluster"]) == 0
    assert frozen.checkpoint() == "9"
    assert frozen.replica_holds() == 5
