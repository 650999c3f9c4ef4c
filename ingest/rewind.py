"""Rewinding a partition to what a board lacks: the worker's ledger of the windows it applied, and the pure
decision of where a resynchronised partition resumes when a board holds less than that (:func:`decide`, pure;
:func:`rewinds_for` reads what it needs for every partition positioned together, in bounded batches).

On a Redis Cluster a board's window is applied on its master and the topic's checkpoint, on another master,
moves once ``WAIT`` counts ``--min-replica-acks`` replicas. A replica promoted without those windows (another
replica acknowledged them, or no acknowledgement was asked) holds the board's watermark *below* what this
worker applied while the checkpoint has moved past it: resuming after the checkpoint would skip the events
the board lacks. The worker remembers, per partition and board, the last window it applied (the
watermark it set, the one it replaced, and the first offset the window folded), and when a positioning finds
such a board behind it resumes early enough to give them again; every other board skips the replay by its
own watermark (the checked fold skips an event at or below its board's watermark).

The rewind never guesses:

- a board whose watermark is **absent** (Redis lost everything, a FLUSHALL, an expired period board, a
  deleted board's keys) is never rewound for: only a present and lower watermark counts;
- a partition a restore or rebuild touched since the ledger's positioning (its ``<p>:gen`` moved, or its
  restoring mark is present) is not rewound: the restore's checkpoint lowering governs, and the ledger goes;
- the epoch must be the ledger's (a re-created log's offsets are not the old log's);
- a board whose lacked events all lie past the checkpoint needs nothing: resuming after it replays them;
- a rewind below the log's first offset is a loss the retention path halts for, but only when the board's
  lacked events themselves may lie below it: the first offset of the lacked windows where they are this
  worker's run since its positioning, not the board's possibly ancient watermark.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flusher.batch import NO_WATERMARK, RewindSource, RewindView, Sink
from ingest.errors import TRANSIENT
from ingest.ledger import Applied
from ingest.metrics import WorkerMetrics
from ingest.partitions import Halt, HaltReason, PartitionState

log = logging.getLogger("hotboard.worker")


@dataclass(frozen=True, slots=True)
class Rewind:
    """The decision: ``seek`` (None: resume after the checkpoint as usual) or ``lost`` (why the partition halts,
    ``retention_lost``: the records a board lacks are gone); the entries still owed."""

    seek: int | None = None
    lost: str | None = None
    owed: dict[str, Applied] = field(default_factory=dict)
    #: board -> (what Redis holds, what this worker applied), for the boards found behind (the log line).
    behind: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: The ledger no longer describes what Redis holds (a restore or rebuild since, another epoch, a log replayed
    #: from its start): every entry goes. Otherwise the last windows stay across the positioning: a replica may
    #: still lack one that its master holds now, and fail over later.
    reset: bool = False

    def sample(self, limit: int = 5) -> str:
        """The first boards found behind, for a log line."""
        shown = [f"{b}: {held} < {mark}" for b, (held, mark) in list(self.behind.items())[:limit]]
        more = len(self.behind) - len(shown)
        return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def decide(
    ledger: Mapping[str, Applied],
    view: RewindView,
    *,
    gen: int,
    epoch: int,
    positioned_gen: int,
    positioned_epoch: int,
    checkpoint: int | None,
    log_start: int,
) -> Rewind:
    """Where the partition resumes, given the ledger (board -> the last window this worker applied), what Redis
    holds now (``view``), the generation and epoch of the ledger's positioning (``gen``, ``epoch``) and of the
    one being made (``positioned_*``, read before ``view``), the checkpoint it is made from, the log's start."""
    if not ledger:
        return Rewind(reset=True)
    restored = view.restoring or not gen == positioned_gen == view.gen or not epoch == positioned_epoch == view.epoch
    if restored or checkpoint is None or checkpoint == NO_WATERMARK:
        return Rewind(reset=True)  # a restore's lowering (or a log replayed from its start) governs: the ledger goes
    if view.checkpoint != checkpoint:
        return Rewind(owed=dict(ledger))  # moved meanwhile: positioned again soon, and decided then
    owed: dict[str, Applied] = {}
    behind: dict[str, tuple[int, int]] = {}
    target: int | None = None
    for board, applied in ledger.items():
        held = view.marks.get(board, NO_WATERMARK)
        if held == NO_WATERMARK or held >= applied.mark:
            continue  # absent: never rewound for; at or past it: the board has the window
        owed[board] = applied
        behind[board] = (held, applied.mark)
        lacked_from = applied.lacked_from(held)
        if lacked_from <= checkpoint and (target is None or lacked_from < target):
            target = lacked_from
    if target is None:
        return Rewind(owed=owed, behind=behind)
    if target < log_start:
        detail = (
            f"boards behind what this worker applied lack records from offset {target}, but the log starts at "
            f"{log_start}"
        )
        return Rewind(lost=detail, behind=behind, reset=True)
    return Rewind(seek=target, owed=owed, behind=behind)


@dataclass(frozen=True, slots=True)
class Positioning:
    """One partition being positioned: its state, the checkpoint it is positioned from, where it would resume
    (right after the checkpoint) and the log's first offset."""

    state: PartitionState
    checkpoint: int | None
    resume: int
    start: int


#: Where a partition resumes (or why it halts), and what its ledger keeps from then on (the entries still owed,
#: the restore generation and epoch of this positioning, whether its last windows go too).
Resumed = tuple[int | Halt, tuple[Mapping[str, Applied], int, int, bool]]


def batched(sizes: Sequence[int], limit: int) -> list[range]:
    """The partitions (by index; ``sizes``: the watermarks each needs read) in consecutive runs, each of at most
    ``limit`` watermarks unless one partition alone holds more (its boards are never split between runs); a run
    ends only where the next partition would not fit."""
    runs: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > limit:
            runs.append(range(start, i))
            start, total = i, 0
        total += size
    if sizes:
        runs.append(range(start, len(sizes)))
    return runs


async def rewinds_for(sink: Sink, wanted: Sequence[Positioning], metrics: WorkerMetrics) -> list[Resumed | Exception]:
    """Where each of ``wanted`` resumes instead of its ``resume``, or why it halts, when a board holds less than
    this worker applied to it; or the error its read failed with (not positioned this round: the caller positions
    it again with its backoff; resuming it without the check could skip what a board lacks). Read together
    (:meth:`RewindSource.load_rewinds`) in batches of about the sink's ``rewind_chunk()`` watermarks
    (:func:`batched`): positioning N partitions after a resync costs the rounds of one, not N, and no more than one
    batch's ledgers and views are held at once; each is still decided alone (:func:`decide`), and a failed read
    fails its own partition (an error reply) or its own batch (the read raised), never the others."""
    if not isinstance(sink, RewindSource):
        return [(w.resume, ({}, 0, 0, True)) for w in wanted]
    # without a ledger there is nothing to check; with one, nothing resumes until its own read has answered
    out: list[Resumed | Exception] = [
        LookupError(f"partition {w.state.partition}: its rewind read was not made")
        if len(w.state.ledger)
        else _resumed(w, {}, None, *sink.restore_state(w.state.partition), metrics)
        for w in wanted
    ]
    asked = [i for i, w in enumerate(wanted) if len(w.state.ledger)]
    for run in batched([len(wanted[i].state.ledger) for i in asked], sink.rewind_chunk()):
        batch = [wanted[asked[j]] for j in run]
        # the generation and epoch of this positioning, read before the views (a restore landing after shows there)
        positioned = [sink.restore_state(w.state.partition) for w in batch]
        entries = [w.state.ledger.entries() for w in batch]
        try:
            views = await sink.load_rewinds({w.state.partition: e for w, e in zip(batch, entries, strict=True)})
        except TRANSIENT as exc:
            views = {w.state.partition: exc for w in batch}
        for j, w, e, (gen, epoch) in zip(run, batch, entries, positioned, strict=True):
            view = views.get(w.state.partition)
            if view is None:  # unanswered: failed, never guessed
                view = LookupError(f"partition {w.state.partition}: the rewind read did not answer it")
            out[asked[j]] = view if isinstance(view, Exception) else _resumed(w, e, view, gen, epoch, metrics)
    for result in out:
        if isinstance(result, Exception) and not isinstance(result, TRANSIENT):
            raise result  # a bug, not an outage (a read left unanswered, say): it ends the worker (ingest/errors.py)
    return out


def _resumed(
    w: Positioning, entries: Mapping[str, Applied], view: RewindView | None, gen: int, epoch: int, m: WorkerMetrics
) -> Resumed:
    if view is None:  # no ledger: nothing to check
        return w.resume, ({}, gen, epoch, True)
    ledger, p, resume = w.state.ledger, w.state.partition, w.resume
    rewind = decide(
        entries,
        view,
        gen=ledger.gen,
        epoch=ledger.epoch,
        positioned_gen=gen,
        positioned_epoch=epoch,
        checkpoint=w.checkpoint,
        log_start=w.start,
    )
    if rewind.behind:
        log.warning("partition %d: boards hold less than this worker applied (held < applied): %s", p, rewind.sample())
    if rewind.lost is not None:
        return Halt(HaltReason.RETENTION_LOST, rewind.lost), ({}, gen, epoch, True)
    if rewind.seek is not None and rewind.seek < resume:
        m.resync_rewinds.labels(str(p)).inc()
        log.warning("partition %d rewinds to %d, before its checkpoint %s", p, rewind.seek, w.checkpoint)
        resume = rewind.seek
    return resume, (rewind.owed, gen, epoch, rewind.reset)
