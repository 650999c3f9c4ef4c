"""``hotboard rebuild``: boards rebuilt in Redis from the Kafka log alone (no archive), swapped in as a restore is.

Each partition is read from its log start to the log end the command found, chunk by chunk, outside any group;
each chunk is decoded, routed to its periods and folded by the worker's own code (:mod:`hotboard.codec`,
:func:`ingest.seasons.route`, :class:`ingest.folds.PartitionFold`), and carried onto the players' states with the
flush scripts' arithmetic (:func:`archive.audit_state.advance`), as a worker's windows are. Each board is then
written beside its live keys and swapped in by the staging and swap restore uses (:mod:`archive.staging`): with
watermarks at the log end read (so a running worker is fenced on it and resynchronises) and the topic's
checkpoints lowered to that end in the same script (so it replays the tail, once).

Definitions are read from Redis, as a worker reads them: after a wipe, declare the boards again first. A board
deleted or a player erased comes back while the log still holds their events (``hotboard restore`` keeps
them out). Where retention cut the log, the events before its start are gone: :class:`LogCut` refuses unless
the caller accepts the loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from archive import staging
from archive.audit import KafkaRange
from archive.audit_state import PlayerState, advance, folded_players
from flusher.batch import NO_WATERMARK, PeriodTarget
from hotboard import board_removal, board_store, keys
from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from hotboard.codec import Decoder, decode_all
from hotboard.periods import split_period_board
from hotboard.redis_client import Client
from ingest.folds import PartitionFold
from ingest.seasons import route

#: Records read and folded per step (one window's worth of a busy partition).
CHUNK = 20_000


class LogCut(Exception):
    """Retention deleted events a rebuild needs; the message is the one line to print."""


@dataclass(frozen=True, slots=True)
class Read:
    """Progress of the read: ``records`` of ``total`` read so far, over every partition."""

    partition: int
    records: int
    total: int


@dataclass(frozen=True, slots=True)
class Rebuilt:
    board: str
    players: int


@dataclass(slots=True)
class _Folded:
    """What the log holds, as the boards' final states."""

    players: dict[str, dict[str, PlayerState]] = field(default_factory=dict)
    defs: dict[str, BoardDef] = field(default_factory=dict)
    periods: dict[str, PeriodTarget] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    invalid: int = 0


def log_cut(firsts: Mapping[int, int], checkpoints: Mapping[int, int]) -> str | None:
    """Why the log cannot rebuild every event (None: it can): a partition no longer starts at 0, or a checkpoint
    lies below its start."""
    for p in sorted(firsts):
        if (cp := checkpoints.get(p)) is not None and cp + 1 < firsts[p]:
            return f"partition {p}: its checkpoint {cp} lies below the log start {firsts[p]}"
    for p in sorted(firsts):
        if firsts[p] > 0:
            return f"partition {p} starts at offset {firsts[p]}: retention deleted offsets 0..{firsts[p] - 1}"
    return None


async def _fold_log(
    redis: Client,
    kafka: KafkaRange,
    board: str | None,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    timeout_s: float,
    progress: Callable[[Read], None],
) -> _Folded:
    out = _Folded()
    decoder = Decoder()
    found: dict[str, BoardDef | DefinitionError] = {}
    total, done = sum(max(0, ends[p] - starts[p] + 1) for p in ends), 0
    for p in sorted(ends):
        after = starts[p] - 1
        while after < ends[p]:
            upto = min(after + CHUNK, ends[p])
            part = await kafka.read(p, after, upto, timeout_s)
            after, done = upto, done + upto - after
            decoded = decode_all(part, decoder)
            if board is not None:  # only the board's events (its periods are routed from them)
                kept = [(r, f) for r, f in zip(part, decoded, strict=True) if type(f) is tuple and f[0] == board]
                part, decoded = [r for r, _ in kept], [f for _, f in kept]
            logical = {f[0] for f in decoded if type(f) is tuple}
            if new := sorted(logical - found.keys()):
                declared = await board_store.load_declared(redis, new)
                found.update({b: DEFAULT if d is None else d for b, d in declared.items()})
            routed = route(part, decoded, found)
            fold = PartitionFold()
            marks = dict.fromkeys((f[0] for f in routed.decoded if type(f) is tuple), NO_WATERMARK)
            counts = fold.fold_checked(part, routed.decoded, marks, set(), routed.defs, {}, routed.periods)
            out.invalid += counts.invalid
            out.periods.update(fold.periods)
            for name, definition in fold.defs.items():
                out.defs[name] = definition
                states = out.players.setdefault(name, {})
                for player in folded_players(fold, name):
                    after_state = advance(fold, name, player, states.get(player), definition)
                    if after_state is not None:
                        states[player] = after_state
            progress(Read(p, done, total))
    out.unreadable = {b: str(d) for b, d in found.items() if isinstance(d, DefinitionError)}
    written = {t.board for t in out.periods.values()}
    for name, d in found.items():  # a seasonal board itself: its periods hold the scores
        if isinstance(d, BoardDef) and d.seasonal and name in written:
            out.defs[name] = d
    return out


async def _swap_board(
    redis: Client,
    topic: str,
    name: str,
    definition: BoardDef,
    players: Mapping[str, PlayerState],
    target: PeriodTarget | None,
    marks: Mapping[str, int],
    lowered: list[Any],
    now_ms: int,
) -> None:
    """Stage ``name`` beside its live keys and swap it in as a restore does (:mod:`archive.staging`)."""
    live, run = staging.live_keys(name), staging.run_token()
    twin = staging.staging_keys(live, run)
    applied = await redis.hgetall(live[1])
    deleted = int(applied.get(keys.APPLIED_DELETED_VERSION.encode(), 0))  # a version goes on from a deletion's
    logical, period = split_period_board(name)
    root = definition.seasonal and period is None
    await staging.stage_players(redis, twin, definition, [(p, s, t, m) for p, (s, t, m) in players.items()])
    if not root:
        await staging.stage_hash(redis, twin, 1, dict(marks))
    await staging.stage_hash(redis, twin, 2, {keys.META_PERIODS: 1} if root else {keys.META_AS_OF: now_ms})
    if period is not None:
        await staging.stage_hash(redis, twin, 3, staging.period_copy(definition))
    else:
        await staging.stage_hash(redis, twin, 3, await redis.hgetall(live[3]))  # as declared, its creation time
    expires = target.expire_at_ms if target is not None else 0
    await staging.swap(redis, topic, live, twin, [-1 if root else deleted, expires], lowered, run)
    if period is None:
        await redis.zadd(keys.BOARD_INDEX_KEY, {logical: 0})


async def rebuild(
    redis: Client,
    kafka: KafkaRange,
    topic: str,
    board: str | None,
    ends: Mapping[int, int],
    *,
    accept_loss: bool,
    timeout_s: float,
    read: Callable[[Read], None],
    progress: Callable[[Rebuilt], None],
) -> tuple[list[Rebuilt], dict[str, str], int]:
    """Rebuild every board the log holds (``board`` None) or one board and its periods, from each partition's
    start to ``ends`` (partition -> its last offset, -1: empty). Returns (boards rebuilt, boards whose stored
    definition cannot be read: left alone, invalid records counted). Raises :class:`LogCut`."""
    now_ms = int(time.time() * 1000)
    partitions = sorted(ends)
    firsts = await kafka.first_offsets(partitions)
    held = await board_removal.checkpoints(redis, topic, partitions)
    checkpoints = {p: cp for p, cp in held.items() if cp != NO_WATERMARK}
    if (cut := log_cut(firsts, checkpoints)) is not None and not accept_loss:
        raise LogCut(cut)
    folded = await _fold_log(redis, kafka, board, firsts, ends, timeout_s, read)
    epochs = await board_removal.epochs(redis, topic, partitions)
    marks = {keys.watermark_field(topic, p, epochs[p]): ends[p] for p in partitions if ends[p] >= 0}
    lowered: list[Any] = []
    for p in partitions:
        # --all: every event up to the end is in the rebuilt boards; one board: the others are not, so a
        # partition without a checkpoint gets none past what its log keeps (replayed, the watermarks skip it)
        if board is None or p in checkpoints:
            lowered += (str(p), ends[p], epochs[p])
        else:
            lowered += (str(p), firsts[p] - 1, epochs[p])
    done: list[Rebuilt] = []
    for name in sorted(folded.defs):
        target = folded.periods.get(name)
        if target is not None and 0 < target.expire_at_ms <= now_ms:
            continue  # expired: a worker's keys would be gone by now too
        players = folded.players.get(name, {})
        await _swap_board(redis, topic, name, folded.defs[name], players, target, marks, lowered, now_ms)
        done.append(Rebuilt(name, len(players)))
        progress(done[-1])
    return done, folded.unreadable, folded.invalid
