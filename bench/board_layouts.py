"""Candidate bookkeeping layouts for many small boards, as bench-only Lua (``python -m bench.boards
--breakdown`` runs them beside the shipped FLUSH and the scripted floor). Neither is a product script: each
measures what a layout change would buy, and each leaves out guarantees the shipped one keeps (see
docs/benchmarks.md, "Many small boards").

- **(a) one bookkeeping hash per board** (``la:{B}:book``): the board's watermarks, ``version``, ``as_of`` and a
  definition ``epoch`` in one hash. Per board: one HMGET (the watermark fields, version, epoch), the compare,
  the ZINCRBYs, one HSET (the new watermarks, version + 1, as_of). Two keys per board instead of four.
- **(b) bookkeeping per script call** (the per-slot idea on one node): boards grouped by a hash of their name
  into groups of about 1,000 (one group = one call, as one slot would be); one shared hash per group
  (``lb:book:{g}``) holds the group's watermark per partition, one version and one definition epoch: one HMGET
  and one HSET per call, and only the ZINCRBYs per board.

- **(c) bookkeeping per hash slot** (the layout the cluster issue proposes, in a form the product could ship): one
  hash per slot (``lc:book:{t}``, ``t`` a tag in that slot) holds the slot's watermark per partition, its version
  and definition epoch; slots are packed into calls of about 1,000 boards (one node) as FLUSH packs boards. Each
  board keeps its own ``version`` (set to the slot's new one, so it moves exactly when the board changes) and
  ``as_of`` in its meta hash: the readers, their caches and feeds would not change. One HMGET, one HINCRBY and one
  HSET per slot, and per board the ZINCRBYs and one HSET.
- **(d) (c) with groups of about 1,000 boards**, one node only (the group is a hash of the name, not the slot).
  (c) and (d) are lower bounds: their scripts leave out the expiry, the spec check, the epoch and the version rule.
- **(e) the product's FLUSH_GROUP** (:mod:`hotboard.lua_groups`) on (d)'s groups, packed by its own caller. Its
  boards take the group's version and ``as_of`` (no per-board meta write), so its floor is (b)'s, not (d)'s.

All do the shipped FLUSH's saturation check (totals held at +-MAX_EXACT) and answer what the sink would need.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from itertools import chain
from typing import Any, Protocol

from redis.asyncio import Redis

from flusher import wire
from flusher.batch import BoardBatch, BoardResult, Outcome
from hotboard import group_flush, keys
from hotboard.group_flush import DefRead, GroupBoard, GroupOutcome, GroupWindow
from hotboard.keys import MAX_EXACT
from hotboard.script import Script

#: (a) KEYS per board: its sorted set, its bookkeeping hash. ARGV per board: n, n triples (watermark field,
#: expected, new), the definition epoch the window was folded under, m, then m player/delta arguments.
#: Answers per board what FLUSH answers: {0, version, saturated, 0}, {1} (already applied), {-1, current...}
#: (fenced) or {-2, epoch} (redefined).
PER_BOARD = f"""
local max = {MAX_EXACT}
local out, now = {{}}, nil
local k, a = 0, 0
while a < #ARGV do
  local board_key, book_key = KEYS[k + 1], KEYS[k + 2]
  local n = tonumber(ARGV[a + 1])
  local epoch_at = a + 2 + 3 * n
  local own = epoch_at + 1
  local last = own + tonumber(ARGV[own])
  local fields = {{}}
  for i = 0, n - 1 do fields[i + 1] = ARGV[a + 2 + 3 * i] end
  fields[n + 1], fields[n + 2] = 'version', 'epoch'
  local held = redis.call('HMGET', book_key, unpack(fields))
  local fenced, already, current = false, true, {{}}
  for i = 0, n - 1 do
    local at = a + 2 + 3 * i
    local cur = held[i + 1] or '-1'
    current[i + 1] = cur
    if cur ~= ARGV[at + 1] then fenced = true end
    if cur ~= ARGV[at + 2] then already = false end
  end
  if fenced then
    if already then out[#out + 1] = {{1}} else table.insert(current, 1, -1); out[#out + 1] = current end
  elseif (held[n + 2] or '0') ~= ARGV[epoch_at] then
    out[#out + 1] = {{-2, held[n + 2] or '0'}}
  else
    local saturated = 0
    for i = own + 1, last - 1, 2 do
      local player = ARGV[i]
      local total = tonumber(redis.call('ZINCRBY', board_key, ARGV[i + 1], player))
      if total > max then redis.call('ZADD', board_key, max, player); saturated = saturated + 1
      elseif total < -max then redis.call('ZADD', board_key, -max, player); saturated = saturated + 1 end
    end
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local version = tonumber(held[n + 1] or '0') + 1
    local marks = {{}}
    for i = 0, n - 1 do
      local at = a + 2 + 3 * i
      marks[2 * i + 1], marks[2 * i + 2] = ARGV[at], ARGV[at + 2]
    end
    marks[2 * n + 1], marks[2 * n + 2], marks[2 * n + 3], marks[2 * n + 4] = 'version', version, 'as_of', now
    redis.call('HSET', book_key, unpack(marks))
    out[#out + 1] = {{0, version, saturated, 0}}
  end
  k, a = k + 2, last
end
return out
"""

#: (b) KEYS: the group's bookkeeping hash, then each board's sorted set. ARGV: n, n triples (watermark field,
#: the group's expected watermark, its new one), the group's definition epoch, then per board m and m
#: player/delta arguments. Answers {0, version, saturated board indexes (1-based)...}, {1}, {-1, current...} or
#: {-2, epoch} for the whole group.
PER_CALL = f"""
local max = {MAX_EXACT}
local book_key = KEYS[1]
local n = tonumber(ARGV[1])
local epoch_at = 2 + 3 * n
local fields = {{}}
for i = 0, n - 1 do fields[i + 1] = ARGV[2 + 3 * i] end
fields[n + 1], fields[n + 2] = 'version', 'epoch'
local held = redis.call('HMGET', book_key, unpack(fields))
local fenced, already, current = false, true, {{}}
for i = 0, n - 1 do
  local at = 2 + 3 * i
  local cur = held[i + 1] or '-1'
  current[i + 1] = cur
  if cur ~= ARGV[at + 1] then fenced = true end
  if cur ~= ARGV[at + 2] then already = false end
end
if fenced then
  if already then return {{1}} end
  table.insert(current, 1, -1)
  return current
end
if (held[n + 2] or '0') ~= ARGV[epoch_at] then return {{-2, held[n + 2] or '0'}} end
local version = tonumber(held[n + 1] or '0') + 1
local out = {{0, version}}
local a = epoch_at + 1
for k = 2, #KEYS do
  local board_key = KEYS[k]
  local stop = a + tonumber(ARGV[a])
  local hit = false
  for i = a + 1, stop, 2 do
    local player = ARGV[i]
    local total = tonumber(redis.call('ZINCRBY', board_key, ARGV[i + 1], player))
    if total > max then redis.call('ZADD', board_key, max, player); hit = true
    elseif total < -max then redis.call('ZADD', board_key, -max, player); hit = true end
  end
  if hit then out[#out + 1] = k - 1 end
  a = stop + 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local marks = {{}}
for i = 0, n - 1 do
  local at = 2 + 3 * i
  marks[2 * i + 1], marks[2 * i + 2] = ARGV[at], ARGV[at + 2]
end
marks[2 * n + 1], marks[2 * n + 2], marks[2 * n + 3], marks[2 * n + 4] = 'version', version, 'as_of', now
redis.call('HSET', book_key, unpack(marks))
return out
"""

#: (a) with its two hash calls cut (attribution only: no fence, nothing kept): what (a) costs besides them, its
#: arguments and Lua work per board. It "holds" the expected watermarks, so it applies every window.
PER_BOARD_NO_HASH = PER_BOARD.replace(
    "local held = redis.call('HMGET', book_key, unpack(fields))",
    "local held = {}\n  for i = 0, n - 1 do held[i + 1] = ARGV[a + 3 + 3 * i] end",
).replace("redis.call('HSET', book_key, unpack(marks))", "")

_PER_CALL = Script(PER_CALL)
SCRIPTS: tuple[str, ...] = (PER_BOARD, PER_CALL, PER_BOARD_NO_HASH)
#: Boards per call, as the sink's MAX_GROUP.
GROUP = 1000
_FIELDS = {p: f"bench:{p}" for p in range(1024)}


class Layout(Protocol):
    name: str
    #: Board sorted sets are ``<prefix>:{B}``.
    prefix: str

    async def flush(self, redis: Redis, batches: list[BoardBatch]) -> tuple[float, list[BoardResult]]:
        """Seconds to apply the window (packing, Redis, and the per-board results a sink would build)."""
        ...


class PerBoard:
    """(a): the window as the sink would send it with one bookkeeping hash per board, 1,000 boards per call."""

    name = "(a) one bookkeeping hash per board"
    prefix = "la"
    script = Script(PER_BOARD)

    def __init__(self) -> None:
        self.marks: dict[tuple[str, int], int] = {}

    async def flush(self, redis: Redis, batches: list[BoardBatch]) -> tuple[float, list[BoardResult]]:
        marks, script = self.marks, self.script

        def commands() -> Iterator[bytes]:
            for i in range(0, len(batches), GROUP):
                keys_: list[str] = []
                args: list[Any] = []
                for batch in batches[i : i + GROUP]:
                    board = batch.board
                    keys_ += (f"la:{{{board}}}", f"la:{{{board}}}:book")
                    args.append(len(batch.offsets))
                    for p, off in batch.offsets.items():
                        args += (_FIELDS[p], marks.get((board, p), -1), off)
                    args += (0, 2 * len(batch.deltas))
                    args.extend(chain.from_iterable(batch.deltas.items()))
                yield script.packed(keys_, args)

        started = time.perf_counter()
        replies = await wire.stream(redis, commands())
        results: list[BoardResult] = []
        for i, reply in zip(range(0, len(batches), GROUP), replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            for batch, r in zip(batches[i : i + GROUP], reply, strict=True):
                assert int(r[0]) == 0, r
                results.append(BoardResult(batch.board, Outcome.APPLIED, batch.players, int(r[1]), int(r[2])))
        seconds = time.perf_counter() - started
        for batch in batches:
            for p, off in batch.offsets.items():
                marks[batch.board, p] = off
        return seconds, results


class PerBoardNoHash(PerBoard):
    """(a) without its HMGET and HSET: attribution only."""

    name = "(a) without its HMGET/HSET (no fence!)"
    script = Script(PER_BOARD_NO_HASH)


def groups_of(batches: list[BoardBatch]) -> list[list[BoardBatch]]:
    """Batches by group: a hash of the board's name, as a slot would be (the same board, the same group)."""
    count = max(1, round(len(batches) / GROUP))
    out: list[list[BoardBatch]] = [[] for _ in range(count)]
    for batch in batches:
        out[zlib.crc32(batch.board.encode()) % count].append(batch)
    return [g for g in out if g]


class PerCall:
    """(b): one bookkeeping hash per group of about 1,000 boards, one call per group."""

    name = "(b) bookkeeping per script call"
    prefix = "lb"

    def __init__(self) -> None:
        self.marks: dict[tuple[int, int], int] = {}  # (group, partition) -> the group's watermark
        self.sizes: tuple[int, int] = (0, 0)

    async def flush(self, redis: Redis, batches: list[BoardBatch]) -> tuple[float, list[BoardResult]]:
        marks = self.marks
        started = time.perf_counter()
        groups = groups_of(batches)
        self.sizes = (min(map(len, groups)), max(map(len, groups)))
        news: list[dict[int, int]] = []

        def commands() -> Iterator[bytes]:
            for g, group in enumerate(groups):
                new: dict[int, int] = {}
                for batch in group:
                    for p, off in batch.offsets.items():
                        if off > new.get(p, -1):
                            new[p] = off
                news.append(new)
                args: list[Any] = [len(new)]
                for p, off in new.items():
                    args += (_FIELDS[p], marks.get((g, p), -1), off)
                args.append(0)
                for batch in group:
                    args.append(2 * len(batch.deltas))
                    args.extend(chain.from_iterable(batch.deltas.items()))
                yield _PER_CALL.packed([f"lb:book:{g}", *(f"lb:{{{b.board}}}" for b in group)], args)

        replies = await wire.stream(redis, commands())
        results: list[BoardResult] = []
        for group, reply in zip(groups, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            assert int(reply[0]) == 0, reply
            version, hit = int(reply[1]), set(map(int, reply[2:]))
            for j, batch in enumerate(group, 1):
                results.append(BoardResult(batch.board, Outcome.APPLIED, batch.players, version, int(j in hit)))
        seconds = time.perf_counter() - started
        for g, new in enumerate(news):
            for p, off in new.items():
                marks[g, p] = off
        return seconds, results


#: (c) bookkeeping per hash slot, many slots per call (the product candidate): one hash per slot (``lc:book:{t}``,
#: ``t`` a tag of the slot) holds the slot's watermark per partition, its version and definition epoch; with
#: ``meta`` each board also keeps its own ``version`` (the slot's new one: it moves exactly when the board
#: changes) and ``as_of`` in ``lc:{B}:meta``, so the readers would not change. KEYS per slot: the hash, then per
#: board its sorted set (and meta hash). ARGV per slot: boards b, n, n triples, epoch, then per board m and m
#: player/delta arguments. Answers one reply per slot: {0, version, saturated board indexes...}, {1}, {-1, ...}.
PER_SLOT = f"""
local max = {MAX_EXACT}
local meta = ARGV[1] == '1'
local per = meta and 2 or 1
local out, now = {{}}, nil
local k, a = 0, 1
while a < #ARGV do
  local book_key, nb, n = KEYS[k + 1], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local triples = a + 3
  local epoch_at = triples + 3 * n
  local fields = {{}}
  for i = 0, n - 1 do fields[i + 1] = ARGV[triples + 3 * i] end
  fields[n + 1], fields[n + 2] = 'version', 'epoch'
  local held = redis.call('HMGET', book_key, unpack(fields))
  local fenced, already, current = false, true, {{}}
  for i = 0, n - 1 do
    local at = triples + 3 * i
    local cur = held[i + 1] or '-1'
    current[i + 1] = cur
    if cur ~= ARGV[at + 1] then fenced = true end
    if cur ~= ARGV[at + 2] then already = false end
  end
  local b = epoch_at + 1
  local stops = {{}}
  for j = 1, nb do stops[j] = b; b = b + 1 + tonumber(ARGV[b]) end
  if fenced then
    if already then out[#out + 1] = {{1}} else table.insert(current, 1, -1); out[#out + 1] = current end
  elseif (held[n + 2] or '0') ~= ARGV[epoch_at] then
    out[#out + 1] = {{-2, held[n + 2] or '0'}}
  else
    local version = redis.call('HINCRBY', book_key, 'version', 1)
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local reply = {{0, version}}
    for j = 1, nb do
      local board_key = KEYS[k + 1 + per * (j - 1) + 1]
      local s = stops[j]
      local hit = false
      for i = s + 1, s + tonumber(ARGV[s]), 2 do
        local player = ARGV[i]
        local total = tonumber(redis.call('ZINCRBY', board_key, ARGV[i + 1], player))
        if total > max then redis.call('ZADD', board_key, max, player); hit = true
        elseif total < -max then redis.call('ZADD', board_key, -max, player); hit = true end
      end
      if meta then redis.call('HSET', KEYS[k + 1 + per * j], 'version', version, 'as_of', now) end
      if hit then reply[#reply + 1] = j end
    end
    local marks = {{}}
    for i = 0, n - 1 do
      local at = triples + 3 * i
      marks[2 * i + 1], marks[2 * i + 2] = ARGV[at], ARGV[at + 2]
    end
    marks[2 * n + 1], marks[2 * n + 2] = 'as_of', now
    redis.call('HSET', book_key, unpack(marks))
    out[#out + 1] = reply
  end
  k, a = k + 1 + per * nb, b - 1
end
return out
"""
#: (c)/(d) with each board's previous version kept beside its version (``prev``): what ``?wait=true``'s exact
#: rule (the covering version is one step past the last one seen) would read once versions are the group's and
#: step by more than one. One HGET more per board.
_META_SET = "if meta then redis.call('HSET', KEYS[k + 1 + per * j], 'version', version, 'as_of', now) end"
PER_SLOT_PREV = PER_SLOT.replace(
    _META_SET,
    "if meta then\n"
    "        local mk = KEYS[k + 1 + per * j]\n"
    "        local prev = redis.call('HGET', mk, 'version') or '0'\n"
    "        redis.call('HSET', mk, 'version', version, 'prev', prev, 'as_of', now)\n"
    "      end",
)
assert PER_SLOT_PREV != PER_SLOT
SCRIPTS = (*SCRIPTS, PER_SLOT, PER_SLOT_PREV)


def _slot_tags() -> list[str]:
    from flusher.cluster import _ack_tags

    return _ack_tags()  # slot -> a hash tag in it


_OUTCOMES = {1: Outcome.ALREADY_APPLIED, -1: Outcome.FENCED, -2: Outcome.REDEFINED}


class PerSlot:
    """(c): one bookkeeping hash per hash slot, slots packed into calls of about 1,000 boards; each board keeps
    its own meta (version = the slot's, as_of)."""

    name = "(c) per slot, per-board meta kept"
    prefix = "lc"
    meta = True
    script = Script(PER_SLOT)

    def __init__(self) -> None:
        self.marks: dict[tuple[int, int], int] = {}  # (slot, partition) -> the slot's watermark
        self.tags = _slot_tags()

    def group_of(self, board: str) -> int:
        from redis.crc import key_slot

        return int(key_slot(f"lc:{{{board}}}".encode()))

    async def flush(self, redis: Redis, batches: list[BoardBatch]) -> tuple[float, list[BoardResult]]:
        marks, tags, meta, script = self.marks, self.tags, self.meta, self.script
        started = time.perf_counter()
        slots: dict[int, list[BoardBatch]] = {}
        for batch in batches:
            slots.setdefault(self.group_of(batch.board), []).append(batch)
        order = list(slots.items())
        calls: list[list[tuple[int, list[BoardBatch]]]] = []
        size = GROUP + 1
        for item in order:
            if size >= GROUP:
                calls.append([])
                size = 0
            calls[-1].append(item)
            size += len(item[1])
        news: dict[int, dict[int, int]] = {}

        def commands() -> Iterator[bytes]:
            for call in calls:
                keys_: list[str] = []
                args: list[Any] = ["1" if meta else "0"]
                for slot, group in call:
                    new: dict[int, int] = {}
                    for batch in group:
                        for p, off in batch.offsets.items():
                            if off > new.get(p, -1):
                                new[p] = off
                    news[slot] = new
                    keys_.append(f"lc:book:{{{tags[slot]}}}")
                    args += (len(group), len(new))
                    for p, off in new.items():
                        args += (_FIELDS[p], marks.get((slot, p), -1), off)
                    args.append(0)
                    for batch in group:
                        keys_.append(f"lc:{{{batch.board}}}")
                        if meta:
                            keys_.append(f"lc:{{{batch.board}}}:meta")
                        args.append(2 * len(batch.deltas))
                        args.extend(chain.from_iterable(batch.deltas.items()))
                yield script.packed(keys_, args)

        replies = await wire.stream(redis, commands())
        results: list[BoardResult] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            for (slot, group), r in zip(call, reply, strict=True):
                code = int(r[0])
                if code != 0:  # the whole slot's window: already applied, fenced or redefined
                    outcome = _OUTCOMES[code]
                    news.pop(slot)
                    results += (BoardResult(b.board, outcome, 0) for b in group)
                    continue
                version, hit = int(r[1]), set(map(int, r[2:]))
                for j, batch in enumerate(group, 1):
                    results.append(BoardResult(batch.board, Outcome.APPLIED, batch.players, version, int(j in hit)))
        seconds = time.perf_counter() - started
        for slot, new in news.items():
            for p, off in new.items():
                marks[slot, p] = off
        return seconds, results


class PerSlotNoMeta(PerSlot):
    """(c) without the per-board meta (attribution only): the version and ``as_of`` would be the slot's, and
    every reader's cache and feed would see each board of the slot change with any one of them."""

    name = "(c) per slot, no board meta (attribution)"
    meta = False


#: (d)'s groups on one node: a fixed number (a durable layout cannot regroup), about 1,000 boards each here.
GROUPS = 100


class PerGroup(PerSlot):
    """(d): (c) with coarser groups, possible on one node only (a script there may touch any key): a board's
    group is a hash of its name modulo :data:`GROUPS`, so a call of 1,000 boards holds about one group and pays
    its bookkeeping once. Each board keeps its own meta, as in (c)."""

    name = "(d) per group of ~1,000 (one node)"

    def __init__(self) -> None:
        super().__init__()
        self.tags = [str(g) for g in range(GROUPS)]

    def group_of(self, board: str) -> int:
        return zlib.crc32(board.encode()) % GROUPS


class PerGroupPrev(PerGroup):
    """(d) with each board's previous version in its meta (``prev``), as ``?wait=true`` would need."""

    name = "(d) + each board's previous version"
    script = Script(PER_SLOT_PREV)


class ProductGroup:
    """(e): the product's own FLUSH_GROUP (:mod:`hotboard.lua_groups`, through :mod:`hotboard.group_flush`) on
    (d)'s groups: what (d) leaves out is in it (the epoch and layout stamp, the EXISTS over the boards' applied,
    definition and meta hashes, the spec marker at a board's first write, the expiry check), and what (d) keeps per
    board it keeps once per group (the version and ``as_of``). Its boards are undeclared: the first window marks
    each one's definition, the update window sends them as marked (no spec read)."""

    name = "(e) FLUSH_GROUP, the product's script"
    prefix = "hb"

    def __init__(self) -> None:
        self.marks: dict[tuple[int, int], int] = {}  # (group, partition) -> the group's watermark
        self.marked: set[str] = set()  # boards whose definition the script has marked
        self.fields = {p: keys.watermark_field("bench", p) for p in range(1024)}

    async def flush(self, redis: Redis, batches: list[BoardBatch]) -> tuple[float, list[BoardResult]]:
        marks, marked, fields = self.marks, self.marked, self.fields
        started = time.perf_counter()
        groups: dict[int, list[BoardBatch]] = {}
        for batch in batches:
            groups.setdefault(keys.group_of(batch.board, GROUPS), []).append(batch)
        windows: list[GroupWindow] = []
        news: dict[int, dict[int, int]] = {}
        stamp = keys.layout_stamp(GROUPS)
        absent, known = DefRead.ABSENT, DefRead.MARKED

        def commands() -> Iterator[bytes]:
            for g, group in groups.items():
                new: dict[int, int] = {}
                for batch in group:
                    for p, off in batch.offsets.items():
                        if off > new.get(p, -1):
                            new[p] = off
                news[g] = new
                boards = [
                    GroupBoard(b.board, b.deltas, definition=known if b.board in marked else absent) for b in group
                ]
                window = GroupWindow(
                    str(g), {fields[p]: (marks.get((g, p), -1), off) for p, off in new.items()}, boards, layout=stamp
                )
                windows.append(window)
                yield group_flush.SCRIPT.packed(*group_flush.command_parts(window))

        replies = await wire.stream(redis, commands())
        results: list[BoardResult] = []
        for group, window, reply in zip(groups.values(), windows, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            got = group_flush.parse(window, reply)
            assert got.outcome is GroupOutcome.APPLIED, got
            for batch, version, saturated in zip(group, got.versions, got.saturated, strict=True):
                results.append(BoardResult(batch.board, Outcome.APPLIED, batch.players, version, saturated))
        seconds = time.perf_counter() - started
        for g, new in news.items():
            for p, off in new.items():
                marks[g, p] = off
        marked.update(b.board for b in batches)
        return seconds, results


SCRIPTS = (*SCRIPTS, group_flush.SCRIPT.text)
