"""What the worker believes about its Redis: which server its state came from, whether that may have changed
since, and whether it must resynchronise before the next flush.

The fold reports what it meets (a failed lookup, a checkpoint that is not the one it positioned from); the flush
step reads and clears it under the worker's lock. One object, so no fold writes the worker's flags.
"""

from __future__ import annotations

import contextlib

from flusher.server import ServerIdentity, ServerRestarted


class RedisHealth:
    def __init__(self) -> None:
        #: The Redis server the partitions were positioned from, checked on every new connection: another one
        #: (a restart that may have lost its last second of writes, AOF everysec) means resynchronise.
        self.identity = ServerIdentity()
        #: Redis failed since it was last asked: check whether it restarted before the next flush.
        self.suspect = False
        #: Redis no longer holds the checkpoint a fold positioned from: resynchronise before flushing.
        self.resync_requested = False

    def positioned_from(self, run_id: str) -> None:
        """Positions are read from the server ``run_id`` (told before any partition resumes from it); another one
        than the known shows in ``identity.restarted_as`` (and refuses new connections until the worker
        resynchronises)."""
        with contextlib.suppress(ServerRestarted):
            self.identity.seen(run_id)

    def answered(self, run_id: str) -> None:
        """Asked after a failure, Redis said which server it is: the suspicion is settled either way."""
        self.positioned_from(run_id)
        self.suspect = False

    def failed(self) -> None:
        """A call to Redis failed: it may come back as another server."""
        self.suspect = True

    def lost_checkpoint(self) -> None:
        """Redis holds another checkpoint than the one the worker positioned from (an emptied Redis, or someone
        moved it): resynchronise first."""
        self.suspect = True
        self.resync_requested = True

    def take_resync(self) -> bool:
        """True once per request to resynchronise."""
        requested, self.resync_requested = self.resync_requested, False
        return requested
