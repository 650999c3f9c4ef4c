"""The assignment against a fake consumer and sink, on a clock the test moves: positioning from checkpoints,
halts and their rechecks, the log-end rule, and the checkpoint moves of a flushed window."""

from __future__ import annotations

from aiokafka import TopicPartition

from flusher.batch import NO_WATERMARK
from ingest.assignment import LOG_END_CONFIRM_S, Assignment
from ingest.checkpoint import Checkpoint
from ingest.metrics import WorkerMetrics
from ingest.partitions import Halt, HaltReason, Phase
from ingest.pausing import PauseReason
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.fakes import FakeConsumer, FakeSink

TP0, TP1 = TopicPartition("scores", 0), TopicPartition("scores", 1)
RECHECK_S = 30.0


class _Rig:
    def __init__(self) -> None:
        self.now = 1000.0
        self.consumer, self.sink, self.metrics = FakeConsumer([TP0, TP1]), FakeSink(), WorkerMetrics()
        settings = WorkerSettings(topic="scores", halt_recheck_s=RECHECK_S)
        self.assignment = Assignment(settings, self.consumer, self.sink, self.metrics, clock=lambda: self.now)  # type: ignore[arg-type]

    async def position(self) -> None:
        await self.assignment.position(self.assignment.waiting())

    def data_loss(self) -> float:
        return self.metrics.registry.get_sample_value("hotboard_redis_data_loss") or 0.0


async def test_assigned_partitions_wait_paused_until_positioned_after_their_checkpoints() -> None:
    rig = _Rig()
    rig.sink.checkpoints[0] = 41  # partition 1 has none, and the log starts at 0: replayed from 0
    assert rig.assignment.add([TP0, TP1, TopicPartition("other", 0)]) == [0, 1]
    assert rig.consumer.paused == {TP0, TP1} and rig.assignment.waiting() == [0, 1] and not rig.assignment.ready
    assert rig.assignment.parts[0].phase is Phase.ASSIGNED
    await rig.position()
    assert sorted(rig.consumer.seeks) == [(TP0, 42), (TP1, 0)]
    assert rig.consumer.paused == set() and rig.assignment.ready and rig.assignment.waiting() == []
    assert rig.assignment.parts[0].phase is Phase.POSITIONED and rig.assignment.parts[0].checkpoint == 41
    assert rig.assignment.parts[1].checkpoint == NO_WATERMARK and rig.assignment.parts[1].next_offset == 0


async def test_a_partition_positioned_under_backpressure_stays_paused_for_it() -> None:
    rig = _Rig()
    rig.assignment.add([TP0])
    rig.assignment.pause([0], PauseReason.BACKPRESSURE)
    await rig.position()
    assert rig.assignment.ready and rig.consumer.paused == {TP0}


async def test_records_deleted_before_they_were_applied_halt_and_are_looked_at_again_every_recheck() -> None:
    rig = _Rig()
    rig.sink.checkpoints[0] = 9
    rig.consumer.starts[TP0] = 25
    rig.assignment.add([TP0])
    await rig.position()
    halt = rig.assignment.halted[0]
    assert halt.reason is HaltReason.RETENTION_LOST and halt.lost == 15
    assert rig.assignment.parts[0].phase is Phase.HALTED and not rig.assignment.ready
    assert rig.consumer.paused == {TP0} and rig.consumer.seeks == [] and rig.data_loss() == 1
    assert rig.sink.halts[0] == (HaltReason.RETENTION_LOST.value, 9)  # recorded with the checkpoint it saw
    rig.now += RECHECK_S - 0.001
    assert rig.assignment.waiting() == []
    rig.now += 0.001
    assert rig.assignment.waiting() == [0]
    await rig.position()  # nobody wrote the checkpoint: still halted, whatever the log says now
    assert rig.assignment.halted[0].reason is HaltReason.RETENTION_LOST and rig.consumer.seeks == []
    rig.sink.checkpoints[0] = 30  # the operator writes it
    rig.now += RECHECK_S
    await rig.position()
    assert rig.assignment.halted == {} and rig.assignment.ready and rig.consumer.seeks == [(TP0, 31)]
    assert rig.consumer.paused == set() and rig.data_loss() == 0 and 0 not in rig.sink.halts


async def test_no_checkpoint_although_the_group_consumed_a_trimmed_log_halts_as_redis_lost() -> None:
    rig = _Rig()
    rig.consumer.starts[TP0], rig.consumer.commits[TP0] = 5, 80
    rig.assignment.add([TP0])
    await rig.position()
    assert rig.assignment.halted[0].reason is HaltReason.REDIS_LOST


async def test_a_resync_positions_every_partition_again_but_a_halted_one_stays_halted() -> None:
    rig = _Rig()
    rig.consumer.starts[TP1], rig.consumer.commits[TP1] = 5, 80
    rig.assignment.add([TP0, TP1])
    await rig.position()
    rig.assignment.pause([0, 1], PauseReason.BACKPRESSURE)
    rig.assignment.unready_all()
    assert rig.assignment.parts[0].phase is Phase.ASSIGNED and rig.assignment.parts[1].phase is Phase.HALTED
    assert rig.assignment.waiting() == [0]  # the halted one waits for its recheck
    assert rig.assignment.pauses.paused_for(PauseReason.BACKPRESSURE) == []
    await rig.position()
    assert rig.assignment.parts[0].ready and 1 in rig.assignment.halted


async def _positioned_at(rig: _Rig, offset: int) -> None:
    rig.sink.checkpoints[0] = offset - 1
    rig.consumer.poll_ms[TP0] = 500  # the last fetch before positioning
    rig.assignment.add([TP0])
    await rig.position()


async def test_a_position_past_the_log_end_halts_only_once_confirmed_from_a_later_fetch() -> None:
    rig = _Rig()
    await _positioned_at(rig, 100)
    rig.consumer.high[TP0] = 40
    assert rig.assignment.check_log_end() == []  # no fetch since positioning: its high watermark is older
    rig.consumer.poll_ms[TP0] = 600
    assert rig.assignment.check_log_end() == []  # past the end from now on
    rig.now += LOG_END_CONFIRM_S - 0.001
    assert rig.assignment.check_log_end() == []  # a new leader's high watermark may lag for a moment
    rig.now += 0.001
    assert rig.assignment.check_log_end() == [0]
    assert rig.assignment.halted[0].reason is HaltReason.BEYOND_LOG_END and rig.consumer.paused == {TP0}


async def test_a_high_watermark_that_catches_up_restarts_the_log_end_confirmation() -> None:
    rig = _Rig()
    await _positioned_at(rig, 100)
    rig.consumer.high[TP0], rig.consumer.poll_ms[TP0] = 40, 600
    assert rig.assignment.check_log_end() == []
    rig.now += LOG_END_CONFIRM_S - 1
    rig.consumer.high[TP0] = 100  # the leader caught up
    assert rig.assignment.check_log_end() == []
    rig.consumer.high[TP0] = 40
    rig.now += 1
    assert rig.assignment.check_log_end() == []  # past the end again, since just now
    rig.now += LOG_END_CONFIRM_S
    assert rig.assignment.check_log_end() == [0]


async def test_checkpoints_move_to_the_window_end_but_stay_below_a_dead_letter_and_skip_halted_partitions() -> None:
    rig = _Rig()
    rig.sink.checkpoints.update({0: 9, 1: 19})
    rig.assignment.add([TP0, TP1])
    await rig.position()
    state0, state1 = rig.assignment.parts[0], rig.assignment.parts[1]
    moves = Checkpoint(rig.assignment.parts, {0: 30, 1: 40, 2: 50}, {0: 25}).moves
    assert moves == {0: (9, 24), 1: (19, 40)}  # partition 2 is not ours
    assert Checkpoint(rig.assignment.parts, {0: 30}, {0: 5}).moves == {}  # never backwards
    rig.assignment.halt(state1, Halt(HaltReason.UNREADABLE, "injected"))
    in_flight: list[tuple[int, int | None]] = []
    rig.sink.on_advance = lambda: in_flight.append(state0.checkpoint_candidates())
    assert await rig.assignment.advance_checkpoints({0: 30, 1: 40}, {}) == {}
    assert in_flight == [(9, 30)]  # a lookup meanwhile accepts either
    assert state0.checkpoint == 30 and state0.checkpoint_candidates() == (30, None)
    assert state1.checkpoint == 19 and rig.sink.checkpoints == {0: 30, 1: 19}
    assert rig.assignment.checkpoints({0, 1, 5}) == {0: 30, 1: 19}


async def test_a_checkpoint_moved_under_us_is_refused_and_left_as_known() -> None:
    rig = _Rig()
    rig.sink.checkpoints[0] = 9
    rig.assignment.add([TP0])
    await rig.position()
    rig.sink.checkpoints[0] = 3  # Redis lost its last writes
    assert await rig.assignment.advance_checkpoints({0: 30}, {}) == {0: 3}
    assert rig.assignment.parts[0].checkpoint_candidates() == (9, None)


async def test_a_worker_answers_before_it_is_entered() -> None:
    worker = Worker(WorkerSettings(topic="scores", redis="redis://127.0.0.1:1/0"), handle_signals=False)
    assert not worker.ready and worker.halted == {} and worker.assigned == []
    assert "parts=[]" in repr(worker)


class _FailingHaltSink(FakeSink):
    """Redis drops the connection when a halt decided during a positioning is recorded at its end."""

    async def record_halt(self, partition: int, reason: str) -> None:
        raise ConnectionError("Connection closed by server.")


async def test_the_server_positioned_from_is_known_even_when_the_positionings_end_fails() -> None:
    """Partition 0 resumes from run-1's checkpoint, partition 1 halts, and recording that halt fails: run-1 must
    still be the known identity, or a restart right after (new run_id, the last second lost) would go unnoticed
    while partition 0 is consumed from run-1's checkpoint."""
    sink = _FailingHaltSink()
    sink.checkpoints.update({0: 41, 1: 9})
    consumer = FakeConsumer([TP0, TP1])
    consumer.starts[TP1] = 25  # retention deleted what partition 1 never applied: it halts
    settings = WorkerSettings(topic="scores", redis="redis://127.0.0.1:1/0", halt_recheck_s=RECHECK_S)
    worker = Worker(settings, handle_signals=False, sink=sink)  # type: ignore[arg-type]
    worker._assignment = Assignment(settings, consumer, sink, worker.metrics)  # type: ignore[arg-type]
    worker._assignment.add([TP0, TP1])
    worker._stopping.set()  # the backoff's wait returns at once
    await worker._position()
    assert worker._assignment.positioned([0, 1]) == {0} and 1 in worker._assignment.halted
    assert worker._identity.known == "run-1"
