"""Apply window batches to Redis exactly once, and read back the watermarks that make it so.

Each board's batch is one ``EVALSHA`` of :data:`FLUSH_SCRIPT`: a compare-and-set on the board's watermarks
followed by the board's ZINCRBYs, the watermark HSET and the meta update. A script runs atomically, so it is
a MULTI/EXEC whose first step is a condition (Redis 7 replicates and AOF-logs its effects wrapped in
MULTI/EXEC): readers see a whole window or none of it, and a zombie that lost its partitions cannot apply a
window the new owner applies too. All boards of a window go out in one pipelined round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum
from itertools import chain
from typing import Any

from hiredis import pack_command
from redis.asyncio import Redis
from redis.exceptions import NoScriptError, ResponseError

from hotboard import keys
from ingest.window import BoardBatch

log = logging.getLogger(__name__)

#: Watermark value meaning "this partition never fed this board".
NO_WATERMARK = -1

# KEYS: board zset, applied hash, meta hash.
# ARGV: n, then n triples (field, expected watermark, new watermark), then player/delta pairs.
# Returns {0, version} applied; {1} this exact window was applied already (a retry after a lost reply);
# {-1, current...} fenced: someone else moved the watermarks (new owner, or Redis lost data).
FLUSH_SCRIPT = """
local n = tonumber(ARGV[1])
local fenced = false
local already = true
local current = {}
for i = 0, n - 1 do
  local cur = redis.call('HGET', KEYS[2], ARGV[2 + 3 * i]) or '-1'
  current[i + 1] = cur
  if cur ~= ARGV[3 + 3 * i] then fenced = true end
  if cur ~= ARGV[4 + 3 * i] then already = false end
end
if fenced then
  if already then return {1} end
  table.insert(current, 1, -1)
  return current
end
local board = KEYS[1]
for i = 2 + 3 * n, #ARGV, 2 do
  redis.call('ZINCRBY', board, ARGV[i + 1], ARGV[i])
end
local marks = {}
for i = 0, n - 1 do
  marks[2 * i + 1] = ARGV[2 + 3 * i]
  marks[2 * i + 2] = ARGV[4 + 3 * i]
end
redis.call('HSET', KEYS[2], unpack(marks))
local version = redis.call('HINCRBY', KEYS[3], 'version', 1)
local t = redis.call('TIME')
redis.call('HSET', KEYS[3], 'as_of', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return {0, version}
"""


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"
    FENCED = "fenced"


@dataclass(frozen=True, slots=True)
class BoardResult:
    board: str
    outcome: Outcome
    #: Sorted-set writes (ZINCRBY) this result put into Redis; 0 unless applied. The fixed bookkeeping per
    #: board (see ``ingest.window.BOOKKEEPING_WRITES_PER_BOARD``) comes on top.
    writes: int
    version: int | None = None


#: (board, partition) -> the watermark this worker believes Redis holds.
ExpectedWatermark = Callable[[str, int], int]


class RedisSink:
    def __init__(self, redis: Redis, topic: str) -> None:
        self._redis = redis
        self._topic = topic
        self._sha: str | None = None
        self._registered: set[str] = set()

    def field(self, partition: int) -> str:
        return keys.watermark_field(self._topic, partition)

    async def load_watermarks(self, partitions: Collection[int]) -> dict[int, dict[str, int]]:
        """partition -> board -> last applied offset, for every known board the partitions fed.

        One SMEMBERS plus one pipelined HMGET per board: cheap even with thousands of boards.
        """
        result: dict[int, dict[str, int]] = {p: {} for p in partitions}
        if not partitions:
            return result
        members = await self._redis.smembers(keys.BOARDS_KEY)
        boards = sorted(b.decode() if isinstance(b, bytes) else str(b) for b in members)
        # What Redis holds now is what counts as registered: after a restart that lost its last second of
        # writes, a board registered in that second is registered again before its next flush.
        self._registered = set(boards)
        if not boards:
            return result
        ordered = list(partitions)
        fields = [self.field(p) for p in ordered]
        async with self._redis.pipeline(transaction=False) as pipe:
            for board in boards:
                pipe.hmget(keys.applied_key(board), fields)
            rows: list[list[bytes | None]] = await pipe.execute()
        for board, row in zip(boards, rows, strict=True):
            for partition, value in zip(ordered, row, strict=True):
                if value is not None:
                    result[partition][board] = int(value)
        return result

    async def server_id(self) -> str:
        """The Redis ``run_id``: it changes when the server restarts (and may have lost its last writes)."""
        info = await self._redis.info("server")
        return str(info["run_id"])

    async def register_boards(self, boards: Iterable[str]) -> None:
        """Add new boards to the registry before their first flush, so a later owner finds their watermarks."""
        new = [b for b in boards if b not in self._registered]
        if new:
            await self._redis.sadd(keys.BOARDS_KEY, *new)
            self._registered.update(new)

    async def flush(self, batches: list[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
        """Apply every batch, each atomically and fenced, all in one pipelined round trip."""
        if not batches:
            return []
        await self.register_boards(b.board for b in batches)
        if self._sha is None:
            self._sha = await self._redis.script_load(FLUSH_SCRIPT)
        commands = [self._command(batch, expected) for batch in batches]
        replies = await self._send(commands)
        if any(isinstance(r, NoScriptError) for r in replies):
            # Redis restarted and forgot the script: nothing in this round was applied by a NOSCRIPT reply.
            self._sha = await self._redis.script_load(FLUSH_SCRIPT)
            retry = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            again = await self._send([self._command(batches[i], expected) for i in retry])
            for i, reply in zip(retry, again, strict=True):
                replies[i] = reply
        return [self._result(batch, reply) for batch, reply in zip(batches, replies, strict=True)]

    def _command(self, batch: BoardBatch, expected: ExpectedWatermark) -> list[Any]:
        board = batch.board
        args: list[Any] = [
            "EVALSHA",
            self._sha,
            3,
            keys.board_key(board),
            keys.applied_key(board),
            keys.meta_key(board),
            len(batch.offsets),
        ]
        for partition, offset in batch.offsets.items():
            args += (self.field(partition), expected(board, partition), offset)
        args.extend(chain.from_iterable(batch.deltas.items()))
        return args

    async def _send(self, commands: list[list[Any]]) -> list[Any]:
        """All commands in one write and one round trip; each reply (or error) in order.

        The payload is packed by hiredis in C: redis-py's asyncio pipeline packs in Python, which costs more
        than Redis spends running the scripts when a window holds 100,000 players."""
        payload = b"".join([pack_command(tuple(command)) for command in commands])
        pool = self._redis.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await conn.send_packed_command(payload)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # an error reply (NOSCRIPT, WRONGTYPE...): the stream stays in sync
                    replies.append(exc)
        except BaseException:
            # Half-read replies would poison the next user of this connection.
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
        return replies

    @staticmethod
    def _result(batch: BoardBatch, reply: Any) -> BoardResult:
        if isinstance(reply, Exception):
            raise reply
        status = int(reply[0])
        if status == 0:
            return BoardResult(batch.board, Outcome.APPLIED, len(batch.deltas), int(reply[1]))
        if status == 1:
            return BoardResult(batch.board, Outcome.ALREADY_APPLIED, 0)
        if status == -1:
            return BoardResult(batch.board, Outcome.FENCED, 0)
        raise ResponseError(f"unexpected flush script reply {reply!r}")
