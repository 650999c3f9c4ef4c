"""Apply window batches to Redis exactly once, and read back the watermarks and checkpoints that make it so.

Each board batch is applied by one script (:data:`hotboard.lua.FLUSH`, which takes many small boards per call,
or :data:`hotboard.lua.APPLY`): a compare-and-set on the board's watermarks followed by its writes, the
watermark HSET and the meta update. Readers see a whole
batch or none of it, and a zombie that lost its partitions cannot apply a window the new owner applies too.
All batches of a window go out in one pipelined round trip; the checkpoints follow in a second one, only
after every batch of the window is confirmed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, cast

from hiredis import pack_command
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from flusher import wire
from flusher.batch import NO_WATERMARK, BoardBatch, BoardResult, ExpectedWatermark, Outcome
from flusher.checkpoints import CheckpointHash
from hotboard import board_store, earliest, keys, lua, lua_definitions, operators
from hotboard.board_store import Found
from hotboard.boards import BoardDef
from hotboard.bounded import BoundedCache
from hotboard.redis_client import Client
from hotboard.script import Script

log = logging.getLogger(__name__)

_FLUSH = Script(lua.FLUSH)
_APPLY = Script(lua.APPLY)
_MARK = Script(lua_definitions.MARK_SEASONAL)
_LOOKUP = Script(lua.LOOKUP)
#: Boards per FLUSH call at most (each brings four keys).
MAX_GROUP = 1000
#: Boards the sink remembers as registered; past it, the least recently flushed is forgotten (a quiet guild's
#: board is then registered once more at its next flush) instead of growing with every board ever flushed.
MAX_REGISTERED = 262_144
#: Definitions whose fence tail (the spec string) is kept, so that a flush does not build one per board.
MAX_TAILS = 256
#: Players per flush script unless the caller says otherwise (the worker's ``max_script_players`` default): a
#: script blocks Redis while it runs, and 4,000 players are about 10-25 ms of it (docs/guarantees.md, "Exactly once
#: into Redis").
SCRIPT_PLAYERS = 4000
#: Board names per ZADD into the board index: a first window of 100,000 new boards registers them in ten commands
#: of one round trip, none of which holds Redis (or one reply buffer) for long.
INDEX_CHUNK = 10_000


class RedisSink(CheckpointHash):
    """The :class:`flusher.batch.Sink` on one Redis (or one Redis Cluster slot per board and per topic); the
    checkpoints, halts and epochs are :class:`flusher.checkpoints.CheckpointHash`'s."""

    #: board -> its hash slot, where a FLUSH call must not mix boards of two slots (None: one server)
    _slot_of: Callable[[str], int] | None = None

    def __init__(self, redis: Client, topic: str, script_players: int = SCRIPT_PLAYERS) -> None:
        super().__init__(redis, topic)
        self._script_players = script_players
        self._tails: BoundedCache[BoardDef, tuple[str, int, int]] = BoundedCache(MAX_TAILS)
        #: board -> the definition it was registered (a seasonal one: marked) under
        self._registered: BoundedCache[str, BoardDef] = BoundedCache(MAX_REGISTERED)

    async def server_id(self) -> str:
        """The Redis ``run_id``: it changes when the server restarts (and may have lost its last writes)."""
        info = await self._redis.info("server")
        return str(info["run_id"])

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]:
        """board -> the partition's watermark on it (NO_WATERMARK when it never fed the board), asked only for
        boards seen past the partition's checkpoint; and, read in the same round trip, the checkpoint itself:
        if it is not the one the worker positioned from, Redis lost (or someone moved) what the answer is
        relative to, and the watermarks must not be trusted."""
        ordered = list(boards)
        # one script, one reply: the checkpoint and every watermark read atomically together (the intake asks
        # for at most a fold chunk's boards at once)
        keys_ = [self._key, *map(keys.applied_key, ordered)]
        args = [str(partition), self.field(partition)]
        checkpoint, *rows = await wire.script(cast(Redis, self._redis), _LOOKUP, keys_, args)
        marks = {b: int(v) for b, v in zip(ordered, rows, strict=True)}
        return marks, int(checkpoint)

    async def load_declared(self, boards: Collection[str]) -> dict[str, Found]:
        """board -> its declared definition, None when undeclared, or why it cannot be read; one round trip, no
        cache (the worker's :class:`ingest.definitions.DefinitionCache` is the one)."""
        return await board_store.load_declared(self._redis, list(boards))

    async def register_boards(self, batches: Iterable[BoardBatch]) -> set[str]:
        """Add new boards to the registry (``hb:board-index``: boards, never their periods) before their first
        flush: it lists boards to readers and operators. Idempotent, so a registry lost with a Redis restart is
        rebuilt by later flushes. A seasonal board is marked written here (its definition is then fixed), in
        one script on its own slot that first checks its stored definition is the one the window was folded
        under: a period's copy is seeded from the batch's, so a stale cached one must not get that far. Every
        batch is checked, not one per board: a board redeclared while a window was folded may have batches
        under both definitions (one partition's chunk read the old one from the cache, another the new one),
        each bound for a period of its own. Returns the seasonal boards with a batch under a definition that
        is not the stored one (their batches are refused as redefined)."""
        new: dict[str, dict[BoardDef, None]] = {}  # board -> the definitions of its batches not known good
        registered = self._registered
        for batch in batches:
            logical = batch.board if batch.period is None else batch.period.board
            known = registered.get(logical)
            if known is not batch.definition and known != batch.definition:  # mostly the cache's very object
                new.setdefault(logical, {})[batch.definition] = None
        if not new:
            return set()
        # packed by hiredis in chunks, all in one round trip: a first window of 100,000 new boards registers
        # them in one write, not one awaited call per seasonal board
        names = list(new)
        commands: list[bytes] = []
        for i in range(0, len(names), INDEX_CHUNK):
            zadd: list[Any] = ["ZADD", keys.BOARD_INDEX_KEY]
            zadd.extend(chain.from_iterable((0, b) for b in names[i : i + INDEX_CHUNK]))
            commands.append(pack_command(tuple(zadd)))
        seasonal = [(b, d.spec) for b, found in new.items() for d in found if d.seasonal]
        commands += [_MARK.packed([keys.meta_key(b), keys.def_key(b)], [s]) for b, s in seasonal]
        route = [keys.BOARD_INDEX_KEY] * (len(commands) - len(seasonal)) + [keys.meta_key(b) for b, _ in seasonal]
        replies = await self._send_keyed(commands, route, (_MARK,))
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        stale: set[str] = set()
        for (board, spec), stored in zip(seasonal, replies[len(replies) - len(seasonal) :], strict=True):
            if (stored.decode(errors="replace") if isinstance(stored, bytes) else str(stored)) != spec:
                stale.add(board)
        for board, found in new.items():
            if board not in stale and len(found) == 1:  # two definitions of one board in a window: one is stale
                registered.put(board, next(iter(found)))
        return stale

    def forget_registry(self) -> None:
        """After a Redis restart the registry may have lost members: register again on the next flush."""
        self._registered.clear()

    async def flush(self, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
        """Apply every batch, each atomically and fenced, all in one pipelined round trip. Plain batches share
        FLUSH calls (up to ``script_players`` players and ``MAX_GROUP`` boards per call): 100,000 small boards
        cost a few dozen scripts and replies, not 100,000."""
        if not batches:
            return []
        stale = await self.register_boards(batches)
        if stale:  # folded under a definition that is no longer the board's: nothing is sent, the worker refolds
            log.warning("boards %s were redeclared since their definition was cached", sorted(stale))
            return [BoardResult(b.board, Outcome.REDEFINED, 0) for b in batches]
        owners: list[tuple[bool, list[int]]] = []
        replies = await self._send_window(self._commands(batches, expected, owners), owners, batches)
        per_batch: list[Any] = [None] * len(batches)
        for reply, (apply, owned) in zip(replies, owners, strict=True):
            if isinstance(reply, Exception):
                raise reply
            if apply:
                per_batch[owned[0]] = reply
                continue
            if len(reply) != len(owned):
                raise ResponseError(f"flush script answered {len(reply)} boards for {len(owned)}")
            for i, board_reply in zip(owned, reply, strict=True):
                per_batch[i] = board_reply
        results = [self._result(batch, reply) for batch, reply in zip(batches, per_batch, strict=True)]
        pairs = zip(batches, per_batch, strict=True)
        reborn = {(b.period.board if b.period else b.board) for b, r in pairs if _reborn(r)}
        if reborn:  # written again after a deletion, which took them off the index: listed again (rare)
            for board in reborn:  # should the ZADD fail, the retried window's registration lists them
                self._registered.discard(board)
            await self._redis.zadd(keys.BOARD_INDEX_KEY, dict.fromkeys(reborn, 0))
        return results

    async def _send_window(
        self, commands: Iterator[bytes], owners: list[tuple[bool, list[int]]], batches: Sequence[BoardBatch]
    ) -> list[Any]:
        """The window's commands out, their replies in (``owners``: which batches each carries, see
        :meth:`_commands`); a NOSCRIPT reply (Redis restarted and forgot the script) applied nothing: just
        those are resent."""
        return await wire.scripts(cast(Redis, self._redis), commands, (_FLUSH, _APPLY))

    async def _send_keyed(self, commands: list[bytes], route: list[str], used: Sequence[Script]) -> list[Any]:
        """Commands each touching the slot of its ``route`` key (one server: all together)."""
        return await wire.scripts(cast(Redis, self._redis), commands, used)

    def _commands(
        self, batches: Sequence[BoardBatch], expected: ExpectedWatermark, owners: list[tuple[bool, list[int]]]
    ) -> Iterator[bytes]:
        """The window's EVALSHA commands, packed, as they are built; ``owners`` gets, per command, whether it is
        an APPLY and which batches it carries (in reply order)."""
        group_keys: list[str] = []
        group_args: list[Any] = []
        group: list[int] = []
        players = 0
        slot_of, group_slot = self._slot_of, -1
        for i, batch in enumerate(batches):
            fence = self._fence(batch, expected)
            plain = batch.states is None and batch.steps is None and not batch.metas
            if not (plain and batch.definition.ties in ("shared", "lexical")):
                owners.append((True, [i]))
                yield self._apply_command(batch, fence)
                continue
            if slot_of is not None:  # a script touches one slot: groups break where the slot changes
                slot, group_slot = group_slot, slot_of(batch.board)
                if group and slot != group_slot:
                    owners.append((False, group))
                    yield _FLUSH.packed(group_keys, group_args)
                    group_keys, group_args, group, players = [], [], [], 0
            if group and (players + len(batch.deltas) > self._script_players or len(group) >= MAX_GROUP):
                owners.append((False, group))
                yield _FLUSH.packed(group_keys, group_args)
                group_keys, group_args, group, players = [], [], [], 0
            board = batch.board
            group_keys += (keys.board_key(board), keys.applied_key(board), keys.meta_key(board), keys.def_key(board))
            group_args += fence
            group_args.append(2 * len(batch.deltas))
            group_args.extend(chain.from_iterable(batch.deltas.items()))
            group.append(i)
            players += len(batch.deltas)
        if group:
            owners.append((False, group))
            yield _FLUSH.packed(group_keys, group_args)

    def _fence(self, batch: BoardBatch, expected: ExpectedWatermark) -> list[Any]:
        board = batch.board
        fields = self._fields
        fence: list[Any] = [len(batch.offsets)]
        for partition, offset in batch.offsets.items():
            field = fields.get(partition) or self.field(partition)
            fence += (field, expected(board, partition), offset)
        definition = batch.definition
        period = batch.period
        if period is not None:  # seed the period's definition copy, and expire its keys when routing said
            fence += (definition.spec, 1, period.expire_at_ms)
        else:
            tail = self._tails.get(definition)
            if tail is None:  # one spec string per definition, not one per board and flush
                tail = (definition.spec, 0, 0)
                self._tails.put(definition, tail)
            fence += tail
        return fence

    def _apply_command(self, batch: BoardBatch, fence: list[Any]) -> bytes:
        board = batch.board
        definition = batch.definition
        players: list[Any] = []
        if batch.steps is not None:
            mode = "steps"
            for player, steps in batch.steps.items():
                players += (player, len(steps))
                for op, amount, ts in steps:
                    players += (op, amount, earliest.tie_text(ts))
        elif batch.states is not None:
            best = operators.best_scores(batch.states, definition.order)
            if best is not None:  # every player's window is a best: (player, score) pairs, a third of the args
                mode = "best"
                players.extend(chain.from_iterable(best.items()))
            else:
                mode = "clamp"
                for player, state in batch.states.items():
                    players.append(player)
                    players.extend(operators.script_args(state))
        else:
            mode = "sum"
            players.extend(chain.from_iterable(batch.deltas.items()))
        dense = "1" if definition.ties == "dense" else "0"
        args = _APPLY.command(
            _board_keys(board), [*fence, mode, definition.order, dense, definition.sign, len(players)]
        )
        args += players
        if batch.metas:
            args.extend(chain.from_iterable(batch.metas.items()))
        return pack_command(tuple(args))  # type: ignore[no-any-return]

    def _result(self, batch: BoardBatch, reply: Any) -> BoardResult:
        if isinstance(reply, Exception):
            raise reply
        status = int(reply[0])
        if status == 0:
            return BoardResult(batch.board, Outcome.APPLIED, batch.players, int(reply[1]), int(reply[2]))
        if status == 1:
            return BoardResult(batch.board, Outcome.ALREADY_APPLIED, 0)
        if status == -1:
            current = {p: int(v) for p, v in zip(batch.offsets, reply[1:], strict=True)}
            return BoardResult(batch.board, Outcome.FENCED, 0, current=current)
        if status == -2:
            return BoardResult(batch.board, Outcome.REDEFINED, 0)
        raise ResponseError(f"unexpected flush script reply {reply!r}")


def _reborn(reply: Any) -> bool:
    """An applied board's reply says whether it was its first batch since the board was deleted."""
    return int(reply[0]) == 0 and len(reply) > 3 and int(reply[3]) == 1


def _board_keys(board: str) -> list[str]:
    """KEYS of the flush scripts, in their order (FLUSH takes the first four)."""
    return [
        *(keys.board_key(board), keys.applied_key(board), keys.meta_key(board), keys.def_key(board)),
        *(keys.player_meta_key(board), keys.members_key(board), keys.dense_key(board), keys.counts_key(board)),
    ]


__all__ = ["NO_WATERMARK", "RedisSink"]
