"""The rewind across resynchronisations: interleavings where the ledger forgets what it needs.

Each test states the interleaving and asserts what docs/guarantees.md promises ("a master that fails over to a
replica lacking windows whose checkpoints moved ... while the worker that applied them holds the partition (it
finds the boards behind the watermarks it applied and rewinds the partition to them)"). They failed on the first
cut of the rewind, whose ledger kept only the entries a positioning found behind and dropped every other last
window (and every run of windows) at each positioning.
"""

from __future__ import annotations

from aiokafka import TopicPartition

from tests.unit.test_rewind import _applied_rig, _Rig

TP0 = TopicPartition("scores", 0)


async def test_a_resync_while_the_replica_still_lags_keeps_what_it_would_rewind_for() -> None:
    """b's window (100..120) lands on its master M; M's replica R has not got it (acks short / the other replica
    acknowledged); the checkpoint moves to 130. Any resync now (a fence on another board, a redeclared board,
    another master's failover) reads b at 120 on M: not behind, and the ledger must keep b's entry all the same.
    Then M dies and R, lacking the window, is promoted: the worker holds the partition and applied the window, so
    it must rewind to 100, not resume after the checkpoint (100..120 would never reach b otherwise)."""
    rig = _Rig()
    await rig.applied_past_the_checkpoint()
    assert await rig.resync() == 131  # a resync for any cause while M still holds the window
    rig.sink.watermarks[("b", 0)] = 99  # M fails over to R, which lacks the window
    assert await rig.resync() == 100, "the window b lacks lies below the checkpoint and is never replayed"


async def test_a_failover_landing_between_the_watermark_and_checkpoint_reads_is_rewound_for_next_time() -> None:
    """The same through the two-round-trip read: b's watermark is read on M (120), then M dies and R is promoted
    before the checkpoint hash is read. The identity change resynchronises again, but b's entry is gone."""
    rig, sink = await _applied_rig()

    def failover() -> None:
        sink.watermarks[("b", 0)] = 99

    sink.between = failover
    assert await rig.resync() == 131  # read 120 before the failover: nothing to rewind yet
    sink.between = lambda: None
    assert await rig.resync() == 100, "the resync the new master's identity causes has forgotten b's window"


async def test_lacked_windows_still_in_the_log_never_halt_as_retention_lost() -> None:
    """b last fed at offset 10 (retention has since deleted up to 4000). This worker takes b from 10 to 5100 (a
    window from 5000), a resync, then from 5100 to 5200 (a window from 5101); checkpoint 6000. b's master fails
    over to a replica lagging since before both windows: it holds 10. Everything b lacks lies at 5000 or past it
    (M held 10 when the first window landed), all in the log, but the run was cut at the resync and the rewind
    goes to 11: the partition halts retention_lost, for an operator."""
    rig = _Rig()
    rig.consumer.starts[TP0] = 4000
    rig.sink.checkpoints[0], rig.sink.watermarks[("b", 0)] = 4999, 10
    await rig.resync()
    rig.apply("b", 5100, first=5000)
    rig.sink.checkpoints[0] = 5100
    rig.state.checkpoint_moved(5100)
    assert await rig.resync() == 5101  # any resync; b at 5100 on M
    rig.apply("b", 5200, first=5101)
    rig.sink.checkpoints[0] = 6000
    rig.state.checkpoint_moved(6000)
    rig.sink.watermarks[("b", 0)] = 10  # the promoted replica lacks both windows
    await rig.resync()
    halt = rig.assignment.halted.get(0)
    assert halt is None, f"halted {halt.reason if halt else ''} though b lacks only 5000..5200, in the log"
    assert rig.consumer.seeks[-1][1] == 5000
