"""The rewind's read on a Redis Cluster (:meth:`flusher.cluster.ClusterSink.load_rewinds`): the watermarks of
every (partition, board) asked, packed in chunks of :data:`REWIND_CHUNK` and their replies mapped back to their
own partition and board, then each partition's checkpoint fields (one ``HMGET``) made into its view.

A reply that is an error (a node error for one board's slot, a TRYAGAIN that outlasted its retries) fails its own
partition only: that partition maps to the error, never to a view built without the watermark (a guess could
resume it past its checkpoint without the rewind check), and its checkpoint fields are not asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from hiredis import pack_command

from flusher.batch import RewindView
from hotboard import keys
from hotboard.script import Script

#: Watermarks per round of a rewind's read, and about the most one read holds (:func:`ingest.rewind.batched`
#: batches the partitions positioned together to it): a worker's ledger holds its boards in use.
REWIND_CHUNK = 10_000

#: ``ClusterSink.routed``: each command to its route key's master, replies in order (error replies as exceptions).
Routed = Callable[[list[bytes], list[str], Sequence[Script], bool], Awaitable[list[Any]]]
#: The checkpoint hash's fields of a partition, in the order :func:`views` reads them.
_FIELDS = (str, keys.gen_field, keys.restoring_field, keys.restoring_by_field, keys.epoch_field)


async def read_marks(
    routed: Routed, field: Callable[[int], str], wanted: Mapping[int, Collection[str]]
) -> dict[int, dict[str, int] | Exception]:
    """partition -> its boards' watermarks (NO_WATERMARK: absent) in the order asked, or the first error reply
    among them; one round per master per chunk of :data:`REWIND_CHUNK` pairs, a partition's boards possibly
    across two chunks."""
    pairs = [(p, b) for p, boards in wanted.items() for b in boards]
    marks: dict[int, dict[str, int] | Exception] = {p: {} for p in wanted}
    chunk_pairs = REWIND_CHUNK  # read once: one call's chunks are all of one size
    for i in range(0, len(pairs), chunk_pairs):
        chunk = pairs[i : i + chunk_pairs]
        route = [keys.applied_key(b) for _, b in chunk]
        commands = [_pack("HGET", k, field(p)) for k, (p, _) in zip(route, chunk, strict=True)]
        rows = await routed(commands, route, (), False)
        for (p, board), v in zip(chunk, rows, strict=True):
            held = marks[p]
            if isinstance(held, Exception):
                continue  # failed already: its first error says why
            if isinstance(v, Exception):
                marks[p] = v
            else:
                held[board] = -1 if v is None else int(v)
    return marks


def checkpoint_fields(partitions: Sequence[int]) -> list[str]:
    """The checkpoint hash fields :func:`views` needs for ``partitions``: checkpoint, restore generation, the two
    restoring marks (``<p>:restoring_by`` names its run, archive.lowering, beside the bare deadline), epoch."""
    return [f(p) for p in partitions for f in _FIELDS]


def views(
    marks: Mapping[int, dict[str, int] | Exception], read: Sequence[int], held: Sequence[Any]
) -> dict[int, RewindView | Exception]:
    """Each partition's view from its watermarks and the checkpoint fields ``held`` (the ``HMGET`` of
    :func:`checkpoint_fields` for ``read``, the partitions whose watermarks were read); a failed one keeps its
    error."""
    n = len(_FIELDS)
    assert len(held) == n * len(read), "one reply per checkpoint field asked"
    fields = {p: held[n * i : n * i + n] for i, p in enumerate(read)}
    out: dict[int, RewindView | Exception] = {}
    for p, got in marks.items():
        if isinstance(got, Exception):
            out[p] = got
            continue
        checkpoint, gen, restoring, restoring_by, epoch = fields[p]
        restored = restoring is not None or restoring_by is not None
        ints = (-1 if checkpoint is None else int(checkpoint), 0 if gen is None else int(gen))
        out[p] = RewindView(got, *ints, restored, 0 if epoch is None else int(epoch))
    return out


def _pack(*parts: Any) -> bytes:
    return pack_command(tuple(parts))  # type: ignore[no-any-return]
