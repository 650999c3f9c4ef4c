"""The group flush's Lua script (docs/group-bookkeeping.md, step 1): one window of many small boards of one group
in one atomic step, fenced by the group's watermarks instead of each board's, and versioned by the group's
version instead of each board's meta. Not used by the worker yet: the sink packs boards for :data:`hotboard.lua.FLUSH`
until a later step flips the layout (:mod:`hotboard.group_flush` is its caller).

Every check comes before the first write (a script that returns early writes nothing), in this order:

1. **The group fence**: a compare-and-set on the group's fields of the call's own partitions only, so the owners
   of two partitions feeding one group never fence each other. All of them already at their new value: the
   window was applied (a retry after a lost reply, a replay), ``{1}``. Otherwise ``{-1, current...}``.
2. **The epoch** (every other writer under a board of the group steps it): ``{-2, epoch}``.
3. **The layout stamp** (mode and number of groups; absent: this is the group's first call): ``{-3, stamp}``.
4. **Old-version writes** (they step no epoch): one multi-key EXISTS over every board's applied hash and the
   definition hashes the worker read as absent (it must answer 0), one over the definition hashes it read as
   present (it must answer their number): ``{-5, first, second}``. A period board past its expiry is left out of
   this and every later step: it is skipped, as FLUSH skips it (written, it would be deleted at once).
5. **The spec of declared boards** (read as ``2``): the stored one must be the folded one, marked or not:
   ``{-4, board index (1-based), stored spec}``.
6. **The meta hashes boards of the call still have** (one EXISTS over them; where some exist, each one's version
   is read): a version that is no number, ``{-6, board index, stored version}``.

Then the call's one version: the group's + 1, and past the version of any meta hash a board of the call still has (a
board written under the old layout; per-board writers such as ERASE still write one too, until step 3 of the plan):
that meta hash loses ``version``, ``as_of`` and ``prev``, so a group board's version and ``as_of`` are its group's
(a reader reads a board's meta fields, else its group's; same field names). Per board: its definition marked
(``<spec>#g2``: the shipped FLUSH then refuses the board) or seeded where it was absent, the ZINCRBYs held at
+-MAX_EXACT, and, on a period board, PEXPIREAT on its sorted set and definition where they have no TTL. Last, the
group's new watermarks, its stamp, and (when a board was written) its version and ``as_of``. Answers ``{0, version,
saturated...}``: one number per board in call order (-1: skipped, past its expiry).
"""

from __future__ import annotations

from hotboard.keys import (
    GROUP_AS_OF,
    GROUP_EPOCH,
    GROUP_LAYOUT,
    GROUP_SPEC_MARK,
    GROUP_VERSION,
    MAX_EXACT,
    META_AS_OF,
    META_VERSION,
)

#: KEYS: the group hash, then four per board: its sorted set, applied hash, meta hash, definition hash.
#: ARGV: the layout stamp, the epoch the worker read ('0': absent), n, n triples (watermark field, the group's
#: expected watermark, its new one), s, s distinct kinds of board (the folded spec, when the keys expire: ms, 0
#: never), then per board: ``3 * kind + read`` (kind: its kind's index, 1-based; read: what the worker read of its
#: definition, 0 absent, 1 marked default or seeded period copy: not read again, 2 declared: its spec is
#: compared), m, then m player/delta arguments. Two numbers of header per board: a call carries ~1,000 boards.
FLUSH_GROUP = f"""
local max, mark = {MAX_EXACT}, '{GROUP_SPEC_MARK}'
local group_key, stamp, epoch, n = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local triples = 4  -- partition i's (0-based) field, expected and new watermark: ARGV[triples + 3 * i], +1, +2
local fields = {{}}
for i = 0, n - 1 do fields[i + 1] = ARGV[triples + 3 * i] end
fields[n + 1], fields[n + 2], fields[n + 3] = '{GROUP_VERSION}', '{GROUP_EPOCH}', '{GROUP_LAYOUT}'
local held = redis.call('HMGET', group_key, unpack(fields))
local fenced, already, current = false, true, {{}}
for i = 0, n - 1 do
  local at = triples + 3 * i
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
if (held[n + 2] or '0') ~= epoch then return {{-2, held[n + 2] or '0'}} end
if held[n + 3] and held[n + 3] ~= stamp then return {{-3, held[n + 3]}} end

local kinds_at = triples + 3 * n  -- ARGV[kinds_at]: s; then s pairs (spec, expiry)
local specs, expiries = {{}}, {{}}
for e = 1, tonumber(ARGV[kinds_at]) do
  specs[e], expiries[e] = ARGV[kinds_at + 2 * e - 1], tonumber(ARGV[kinds_at + 2 * e])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Walk the boards once: where each one's players start, its definition read and kind, which are past their
-- expiry, the keys to check.
local starts, reads, kinds, dead, absent, present, metas = {{}}, {{}}, {{}}, {{}}, {{}}, {{}}, {{}}
local na, np, nm, declared = 0, 0, 0, false
local a, nb, last = kinds_at + 1 + 2 * tonumber(ARGV[kinds_at]), 0, #ARGV
while a <= last do
  nb = nb + 1
  local h = tonumber(ARGV[a])
  local read = h % 3
  local kind = (h - read) / 3
  starts[nb], reads[nb], kinds[nb] = a + 1, read, kind
  local expire_ms = expiries[kind]
  if expire_ms ~= 0 and expire_ms <= now then
    dead[nb] = true
  else
    local k = 4 * nb - 2  -- KEYS[k]: the board's sorted set; k + 1 applied, k + 2 meta, k + 3 definition
    na, nm = na + 1, nm + 1
    absent[na], metas[nm] = KEYS[k + 1], KEYS[k + 2]
    if read == 0 then
      na = na + 1
      absent[na] = KEYS[k + 3]
    else
      np = np + 1
      present[np] = KEYS[k + 3]
      if read == 2 then declared = true end
    end
  end
  a = a + 2 + tonumber(ARGV[a + 1])
end
local function exists(list)  -- in slices: unpack is bounded by Lua's C stack
  local found = 0
  for i = 1, #list, 1000 do
    found = found + redis.call('EXISTS', unpack(list, i, math.min(i + 999, #list)))
  end
  return found
end
local found_absent, found_present = exists(absent), exists(present)
if found_absent ~= 0 or found_present ~= np then return {{-5, found_absent, found_present}} end
local unmarked = {{}}
for j = 1, declared and nb or 0 do
  if not dead[j] and reads[j] == 2 then
    local want = specs[kinds[j]]
    local spec = redis.call('HGET', KEYS[4 * j + 1], 'spec')
    if spec == want then unmarked[j] = true elseif spec ~= want .. mark then return {{-4, j, spec or ''}} end
  end
end

-- Every live board of the call takes one version: one past the group's, and past any meta hash a board still has
-- (written under the old layout: its first group write deletes it, so the board reads its group's from then on).
local version = tonumber(held[n + 1] or '0') + 1
local owned = {{}}
if nm > 0 and exists(metas) > 0 then  -- read every one before the first write: a bad one refuses the whole call
  for j = 1, nb do
    if not dead[j] then
      local meta_key = KEYS[4 * j]
      local raw = redis.call('HGET', meta_key, '{META_VERSION}')
      local own = tonumber(raw or '0')
      if not own then return {{-6, j, raw}} end
      if own >= version then version = own + 1 end
      owned[#owned + 1] = meta_key
    end
  end
end
for _, meta_key in ipairs(owned) do  -- only the fields the group now holds for the board
  redis.call('HDEL', meta_key, '{META_VERSION}', '{META_AS_OF}', 'prev')
end
local out = {{0, version}}
for j = 1, nb do
  local k = 4 * j - 2
  local board_key, def_key = KEYS[k], KEYS[k + 3]
  local saturated = -1
  if not dead[j] then
    saturated = 0
    if reads[j] == 0 then  -- its first group write: the definition copy, marked (a period's seed, or the default)
      local want = specs[kinds[j]]
      local order, operator, ties = string.match(want, '^(%a+)/(%a+)/(%a+)')
      redis.call('HSET', def_key, 'spec', want .. mark, 'order', order, 'operator', operator, 'ties', ties)
    elseif unmarked[j] then
      redis.call('HSET', def_key, 'spec', specs[kinds[j]] .. mark)
    end
    local a = starts[j]  -- ARGV[a]: m; the player/delta pairs follow
    for i = a + 1, a + tonumber(ARGV[a]), 2 do
      local total = tonumber(redis.call('ZINCRBY', board_key, ARGV[i + 1], ARGV[i]))
      if total > max or total < -max then  -- held at +-max, as FLUSH holds it
        redis.call('ZADD', board_key, total > 0 and max or -max, ARGV[i])
        saturated = saturated + 1
      end
    end
    local expire_ms = expiries[kinds[j]]
    if expire_ms > 0 then
      for _, key in ipairs({{board_key, def_key}}) do
        if redis.call('PTTL', key) == -1 then redis.call('PEXPIREAT', key, expire_ms) end
      end
    end
  end
  out[j + 2] = saturated
end
local marks = {{}}
for i = 0, n - 1 do
  local at = triples + 3 * i
  marks[2 * i + 1], marks[2 * i + 2] = ARGV[at], ARGV[at + 2]
end
marks[2 * n + 1], marks[2 * n + 2] = '{GROUP_LAYOUT}', stamp
if nm > 0 then  -- a live board changed: the group's version and as_of are every group board's
  marks[2 * n + 3], marks[2 * n + 4] = '{GROUP_VERSION}', version
  marks[2 * n + 5], marks[2 * n + 6] = '{GROUP_AS_OF}', now
end
redis.call('HSET', group_key, unpack(marks))
return out
"""
