"""One topic's checkpoint hash (``hb:ckpt:{T}``, one Redis Cluster slot): each partition's checkpoint, its halt,
its log **epoch**, which names the watermark field its boards keep, and its restore **generation**, which every
restore or rebuild swap bumps: a checkpoint move expects the one read at positioning, so a move decided before a
swap is refused even where the swap left the checkpoint's value as it was.

The epoch ties every board's watermarks to the log they came from. A topic deleted and re-created starts its
offsets at 0 again while the boards still hold the old log's watermarks, so an event of the new log at or below
one would be skipped as applied. When the operator lifts such a halt (``beyond_log_end``) the epoch moves, in
the same script that lifts it: from then on the partition's watermarks live under a new field that no board
holds yet, and every event of the new log counts once. One write on this slot, whatever the number of boards:
nothing to clear board by board, so no crash can leave half of them cleared. The old fields stay behind, one
per board the old log fed.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from flusher.batch import NO_WATERMARK, CheckpointResult
from hotboard import keys, lua
from hotboard.redis_client import Client
from hotboard.script import Script

_CHECKPOINT = Script(lua.CHECKPOINT)
_RECORD_HALT = Script(lua.RECORD_HALT)
_LIFT_HALT = Script(lua.LIFT_HALT)


class CheckpointHash:
    """Checkpoints, halts and epochs of one topic's partitions; the watermark field of each partition's epoch."""

    def __init__(self, redis: Client, topic: str) -> None:
        self._redis = redis
        self._topic = topic
        self._key = keys.checkpoint_key(topic)
        #: partition -> its epoch, as read at its last positioning (absent: 0).
        self._epochs: dict[int, int] = {}
        self._fields: dict[int, str] = {}
        #: partition -> its restore generation (``<p>:gen``), as read at its last positioning (absent: 0).
        self._gens: dict[int, int] = {}

    def field(self, partition: int) -> str:
        """The watermark field this partition's boards keep, in the epoch it was positioned in."""
        field = self._fields.get(partition)
        if field is None:
            field = self._fields[partition] = keys.watermark_field(
                self._topic, partition, self._epochs.get(partition, 0)
            )
        return field

    def restore_state(self, partition: int) -> tuple[int, int]:
        """The partition's restore generation and epoch as read at its last positioning (absent: 0)."""
        return self._gens.get(partition, 0), self._epochs.get(partition, 0)

    def _set_epoch(self, partition: int, epoch: int) -> None:
        self._epochs[partition] = epoch
        self._fields.pop(partition, None)

    async def load_checkpoints(self, partitions: Collection[int]) -> dict[int, int]:
        """partition -> checkpoint, for the partitions that have one."""
        return (await self.load_positions(partitions))[0]

    async def load_positions(self, partitions: Collection[int]) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        """One HMGET: partition -> checkpoint (where there is one), and partition -> (reason, checkpoint then)
        of a halt recorded earlier. A halt holds while the checkpoint is unchanged (an operator lifts it by
        writing the checkpoint). Each partition's epoch is read too: its watermarks from now on are that
        epoch's; and its restore generation, which every checkpoint move from now on expects."""
        ordered = list(partitions)
        if not ordered:
            return {}, {}
        fields = [f for p in ordered for f in (str(p), keys.halt_field(p), keys.epoch_field(p), keys.gen_field(p))]
        values = await self._redis.hmget(self._key, fields)
        checkpoints: dict[int, int] = {}
        halts: dict[int, tuple[str, int]] = {}
        for i, p in enumerate(ordered):
            checkpoint, halt, epoch, gen = values[4 * i : 4 * i + 4]
            if checkpoint is not None:
                checkpoints[p] = int(checkpoint)
            if halt is not None:
                reason, _, at = (halt.decode() if isinstance(halt, bytes) else str(halt)).partition(" ")
                halts[p] = (reason, int(at))
            self._set_epoch(p, 0 if epoch is None else int(epoch))
            self._gens[p] = 0 if gen is None else int(gen)
        return checkpoints, halts

    async def record_halt(self, partition: int, reason: str) -> None:
        """Recorded at the checkpoint Redis holds now, which from then on only an operator moves."""
        await _RECORD_HALT(self._redis, [self._key], [str(partition), reason])

    async def lift_halt(self, partition: int, recorded: tuple[str, int], new_log: bool) -> int | None:
        """Lift the halt recorded as ``recorded`` (the operator wrote the checkpoint since); ``new_log``: the
        partition's log is not the one its boards' watermarks came from, so it enters a new epoch. Returns the
        checkpoint to resume after (NO_WATERMARK: none), or None when the halt changed meanwhile (position
        again)."""
        reason, at = recorded
        reply: Any = await _LIFT_HALT(
            self._redis, [self._key], [str(partition), f"{reason} {at}", "1" if new_log else "0"]
        )
        if reply is None:
            return None
        epoch, checkpoint = (int(v) for v in reply)
        self._set_epoch(partition, epoch)
        return checkpoint

    async def advance_checkpoints(self, moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]:
        """``moves``: partition -> (expected, new). Each moves only from the value the worker expects, and only
        if no restore or rebuild swapped boards in since the partition was positioned (its generation)."""
        if not moves:
            return []
        args: list[Any] = []
        for partition, (old, new) in moves.items():
            args += (str(partition), old, new, self._gens.get(partition, 0))
        replies = await _CHECKPOINT(self._redis, [self._key], args)
        return [CheckpointResult(p, int(ok) == 1, int(prev)) for p, (ok, prev) in zip(moves, replies, strict=True)]


__all__ = ["NO_WATERMARK", "CheckpointHash"]
