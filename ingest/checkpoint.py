"""One window's checkpoint moves: where each partition's checkpoint goes once every board batch of the window is
confirmed, in flight while Redis moves them, and settled into the partitions' state from Redis's reply.

A checkpoint moves to the last offset the window covered, never to or past a dead letter still unacknowledged
(the letter is sent again after a restart), never backwards, and never for a halted partition (its checkpoint is
the operator's to move; its boards took the window all the same). Each moves only from the value the worker
knows: Redis holding another one means someone else moved it, and the worker resynchronises.
"""

from __future__ import annotations

from collections.abc import Mapping

from flusher.batch import Sink
from ingest.partitions import PartitionState


class Checkpoint:
    """``Checkpoint(states, covered, letters)``, then ``await checkpoint.commit(sink)``."""

    def __init__(
        self, states: Mapping[int, PartitionState], covered: Mapping[int, int], lowest_letter: Mapping[int, int]
    ) -> None:
        """``covered``: partition -> last offset the window holds; ``lowest_letter``: partition -> offset of its
        oldest unacknowledged dead letter."""
        self._states: dict[int, PartitionState] = {}
        #: partition -> (the checkpoint Redis should hold, the one it moves to).
        self.moves: dict[int, tuple[int, int]] = {}
        for p, last in covered.items():
            state = states.get(p)
            if state is None or state.halt is not None:
                continue
            new = min(last, lowest_letter.get(p, last + 1) - 1)
            if new > state.checkpoint:
                self.moves[p] = (state.checkpoint, new)
                self._states[p] = state

    async def commit(self, sink: Sink) -> dict[int, int]:
        """Move them in Redis; the moves that landed update their partitions. Returns the refused ones: partition
        -> the checkpoint Redis holds. Raises what Redis raises (nothing moved as far as the worker knows)."""
        for p, (_, new) in self.moves.items():
            self._states[p].checkpoint_moving(new)
        try:
            results = await sink.advance_checkpoints(self.moves)
        finally:
            for state in self._states.values():
                state.checkpoint_moving(None)
        for r in results:
            if r.ok:
                self._states[r.partition].checkpoint_moved(self.moves[r.partition][1])
        return {r.partition: r.previous for r in results if not r.ok}
