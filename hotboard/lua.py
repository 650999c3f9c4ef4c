"""The flush's Lua scripts (as arq keeps its Lua in ``lua.py``): the windows, the watermark lookups, the
checkpoints and halts. The board definitions' are in :mod:`hotboard.lua_definitions`, the read API's in
:mod:`hotboard.lua_reads`; :mod:`hotboard.script` calls them all.

A script runs atomically, so each is a MULTI/EXEC whose first step is a condition (Redis 7 replicates and
AOF-logs its effects wrapped in MULTI/EXEC). Each names its KEYS and ARGV in its first lines.
"""

from __future__ import annotations

from hotboard.boards import DEFAULT
from hotboard.keys import APPLIED_DELETED_VERSION, MAX_EXACT, META_AS_OF, META_VERSION

#: What every flush script starts with, for one board whose KEYS follow ``k`` and whose ARGV follow ``a`` (FLUSH
#: takes many boards per call). Its KEYS: board zset, applied hash, meta hash, definition hash (APPLY adds the
#: aux structures). Its ARGV: n, then n triples (watermark field, expected watermark, new watermark), then the
#: spec the window was folded under, ``seed`` (1 on a period board: ``B@2026-W49`` keeps a copy of B's
#: definition, written with its first window) and when its keys expire (ms; 0: never); the script's own
#: arguments for the board follow. ``fence`` is the compare-and-set on the watermarks, then the definition check:
#: it answers nil to go on, or the board's reply: {1} this exact step was applied already (a retry after a lost
#: reply), or the board is a period past its expiry (a replay or a lagging worker: written, it would be deleted
#: at once); {-1, current...} fenced (someone else moved a watermark: a new owner, or Redis lost writes); {-2,
#: spec} the board's definition is not the one the worker folded with. Either way it also answers n, where the
#: board's own arguments start, and the expiry. ``commit`` writes the new watermarks and bumps the meta; it
#: answers {0, version, saturated, reborn} (reborn 1: the board's first batch since it was deleted, see
#: :mod:`hotboard.lua_removal`: it must be listed again).
_PRELUDE = f"""
local max = {MAX_EXACT}
local function fence(k, a)
  local applied_key, def_key = KEYS[k + 2], KEYS[k + 4]
  local n = tonumber(ARGV[a + 1])
  local triples = a + 2  -- partition i's (0-based) field, expected and new watermark: ARGV[triples + 3 * i], +1, +2
  local spec_at = triples + 3 * n  -- past the triples: the spec, seed and expiry, then the board's own arguments
  local want, seed, expire_ms = ARGV[spec_at], ARGV[spec_at + 1] == '1', tonumber(ARGV[spec_at + 2])
  local own = spec_at + 3
  if expire_ms > 0 then
    local t = redis.call('TIME')
    if expire_ms <= tonumber(t[1]) * 1000 then return {{1}}, n, own, expire_ms end  -- past its expiry: nothing to keep
  end
  local fenced, already, current, fields = false, true, {{}}, {{}}
  for i = 0, n - 1 do fields[i + 1] = ARGV[triples + 3 * i] end
  local held = n > 0 and redis.call('HMGET', applied_key, unpack(fields)) or {{}}  -- one call, every partition
  for i = 0, n - 1 do
    local at = triples + 3 * i
    local expected, new = ARGV[at + 1], ARGV[at + 2]
    local cur = held[i + 1] or '-1'
    current[i + 1] = cur
    if cur ~= expected then fenced = true end
    if cur ~= new then already = false end
  end
  if fenced then
    if already then return {{1}}, n, own, expire_ms end
    table.insert(current, 1, -1)
    return current, n, own, expire_ms
  end
  local spec = redis.call('HGET', def_key, 'spec')
  if not spec and seed then
    -- a period board's first window: it keeps a copy of its board's definition (the reads use it)
    spec = want
    local order, operator, ties = string.match(spec, '^(%a+)/(%a+)/(%a+)')
    redis.call('HSET', def_key, 'spec', spec, 'order', order, 'operator', operator, 'ties', ties)
  end
  spec = spec or '{DEFAULT.spec}'
  if spec ~= want then return {{-2, spec}}, n, own, expire_ms end
  return nil, n, own, expire_ms
end
local now = nil  -- ms, read from TIME once per call
local function commit(k, a, n, expire_ms, nkeys, saturated)
  local applied_key, meta_key, triples = KEYS[k + 2], KEYS[k + 3], a + 2  -- the fence's ARGV layout
  local marks = {{}}
  for i = 0, n - 1 do
    local at = triples + 3 * i
    marks[2 * i + 1] = ARGV[at]  -- the watermark field
    marks[2 * i + 2] = ARGV[at + 2]  -- the new watermark
  end
  redis.call('HSET', applied_key, unpack(marks))
  local version, reborn = redis.call('HINCRBY', meta_key, '{META_VERSION}', 1), 0
  if version == 1 then  -- a new meta: on a deleted board, go on from the delete's version
    local floor = redis.call('HGET', applied_key, '{APPLIED_DELETED_VERSION}')
    if floor then version, reborn = redis.call('HINCRBY', meta_key, '{META_VERSION}', tonumber(floor)), 1 end
  end
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  redis.call('HSET', meta_key, '{META_AS_OF}', now)
  if expire_ms > 0 then
    for j = k + 1, k + nkeys do
      if redis.call('PTTL', KEYS[j]) == -1 then redis.call('PEXPIREAT', KEYS[j], expire_ms) end
    end
  end
  return {{0, version, saturated, reborn}}
end
"""

#: Windows of ``incr`` events on boards without aux structures (ties shared or lexical, no meta), several boards
#: per call (many small boards cost one script, not one each; a Redis Cluster sink groups them by slot): for
#: each board, the fence, then one ZINCRBY per player. KEYS: four per board (see _PRELUDE). ARGV per board: the
#: fence's, the number m of player/delta arguments, then them. Answers one reply per board. Totals are held at
#: +-MAX_EXACT: beyond 2^53 a double no longer holds every integer.
FLUSH = (
    _PRELUDE
    + """
local out = {}
local k, a = 0, 0  -- the KEYS and ARGV of the boards before this one
while a < #ARGV do
  local early, n, own, expire_ms = fence(k, a)
  local last = own + tonumber(ARGV[own])  -- ARGV[own]: m; the pairs, to the board's last argument
  if early then
    out[#out + 1] = early
  else
    local board_key, saturated = KEYS[k + 1], 0
    for i = own + 1, last - 1, 2 do
      local player, delta = ARGV[i], ARGV[i + 1]
      local total = tonumber(redis.call('ZINCRBY', board_key, delta, player))
      if total > max then
        redis.call('ZADD', board_key, max, player)
        saturated = saturated + 1
      elseif total < -max then
        redis.call('ZADD', board_key, -max, player)
        saturated = saturated + 1
      end
    end
    out[#out + 1] = commit(k, a, n, expire_ms, 4, saturated)
  end
  k, a = k + 4, last
end
return out
"""
)

#: Every other window: the fence, then each player's new score from its old one, by ``mode``:
#: ``sum`` (player, delta), ``best`` (player, score: every window a plain best), ``clamp`` (player, d1, d2, lo,
#: hi, absent: see hotboard.operators.script_args) or
#: ``steps`` (player, k, then k triples operator, amount, 16-digit time: replayed as hotboard.earliest.replay);
#: then the aux structures of dense and earliest boards, and the players' meta. KEYS: board zset, applied hash,
#: meta hash, definition hash, player meta hash, members hash, dense zset, counts hash. ARGV after the fence:
#: mode, order, dense (1/0), sign (-1 stores -score), the number of player arguments, them, then meta pairs.
APPLY = (
    _PRELUDE
    + """
local board_key, pmeta_key, members_key, dense_key, counts_key = KEYS[1], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local early, n, own, expire_ms = fence(0, 0)
if early then return early end
local mode, desc, dense, sign = ARGV[own], ARGV[own + 1] == 'desc', ARGV[own + 2] == '1', tonumber(ARGV[own + 3])
local players_at = own + 5
local metas_at = players_at + tonumber(ARGV[own + 4])  -- the meta pairs, to the end
local saturated = 0
local counts = {}
local function hold(x)
  if x > max then saturated = saturated + 1; return max end
  if x < -max then saturated = saturated + 1; return -max end
  return x
end
local function count(score, by)
  counts[score] = (counts[score] or 0) + by  -- keyed by the number: printed once per distinct score, below
end
local function put(player, old, new)
  if old == new then return end
  redis.call('ZADD', board_key, new, player)
  if dense then
    if old then count(old, -1) end
    count(new, 1)
  end
end
local i = players_at  -- the next player's first argument
while i < metas_at do
  local player = ARGV[i]
  if mode == 'steps' then
    local m = redis.call('HGET', members_key, player)  -- the player's member: its 16-digit tie time, then its id
    local v, t = nil, nil
    if m then
      local stored = redis.call('ZSCORE', board_key, m)
      if stored then v = sign * tonumber(stored); t = string.sub(m, 1, 16) end
    end
    local v0, t0 = v, t
    local steps = tonumber(ARGV[i + 1])
    i = i + 2
    for _ = 1, steps do
      local op, amount, ts = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
      i = i + 3
      local nv
      if op == 'incr' then nv = hold((v or 0) + amount)
      elseif op == 'decr' then nv = math.max((v or 0) - amount, 0)
      elseif op == 'best' and v ~= nil then
        if (desc and amount > v) or (not desc and amount < v) then nv = amount else nv = v end
      else nv = amount end
      if v == nil or nv ~= v or op == 'put' then t = ts end
      v = nv
    end
    if v ~= v0 or t ~= t0 then
      local member = t .. player
      if m and m ~= member then redis.call('ZREM', board_key, m) end
      local stored = sign * v
      if stored == 0 then stored = 0 end
      redis.call('ZADD', board_key, stored, member)
      if m ~= member then redis.call('HSET', members_key, player, member) end
    end
  else
    local old = redis.call('ZSCORE', board_key, player)
    if old then old = tonumber(old) end
    local new
    if mode == 'sum' then
      local delta = tonumber(ARGV[i + 1])
      new = hold((old or 0) + delta)
      i = i + 2
    elseif mode == 'best' then
      new = tonumber(ARGV[i + 1])
      if old and ((desc and old > new) or (not desc and old < new)) then new = old end
      i = i + 2
    else  -- clamp: (old + d1 + d2) held to [lo, hi], or absent for a player not on the board
      if old then
        local d1, d2 = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
        local lo, hi = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
        new = math.min(math.max(old + d1 + d2, lo), hi)
      else
        new = tonumber(ARGV[i + 5])  -- absent
      end
      new = hold(new)
      i = i + 6
    end
    put(player, old, new)
  end
end
for score, c in pairs(counts) do
  if c ~= 0 then
    local s = string.format('%.17g', score)
    local held = redis.call('HINCRBY', counts_key, s, c)
    if held <= 0 then
      redis.call('HDEL', counts_key, s)
      redis.call('ZREM', dense_key, s)
    elseif held == c then
      redis.call('ZADD', dense_key, score, s)
    end
  end
end
for j = metas_at, #ARGV, 2 do
  local player, meta = ARGV[j], ARGV[j + 1]
  redis.call('HSET', pmeta_key, player, meta)
end
return commit(0, 0, n, expire_ms, 8, saturated)
"""
)

#: Advance per-partition checkpoints, each only from the value the worker knows. KEYS: checkpoint hash. ARGV:
#: quadruples (partition, expected, new, generation); expected '-1' means "absent". Returns one {ok, previous} per
#: quadruple: a mismatch (absent after a FLUSHALL, behind after a lost second, ahead after another owner) is the
#: worker's cue to resynchronise, never overwritten. The generation (``<p>:gen``, absent: '0') is the one the
#: worker read when it positioned the partition: a restore or rebuild swap bumps it, so a move decided before a
#: swap is refused even where the swap left the checkpoint's value as it was (the window it covers may be missing
#: from the swapped board). A halted partition's checkpoint (``<p>:halt`` present) never moves here: while it is
#: halted only an operator writes it, and that write is what lifts the halt. Nor one being swapped in on a Redis
#: Cluster (``<p>:restoring``: a deadline, ms of Redis TIME, asked only then; ``<p>:restoring_by``: ``<run>
#: <deadline>``; either live holds it, see archive.lowering): past its deadline a mark is a dead run's, deleted.
CHECKPOINT = """
local ckpt_key = KEYS[1]
local out = {}
local now_ms
for i = 1, #ARGV, 4 do
  local p, expected, new, gen = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local held = redis.call('HMGET', ckpt_key, p, p .. ':gen', p .. ':halt', p .. ':restoring', p .. ':restoring_by')
  local cur, restoring = held[1] or '-1', false
  if held[4] or held[5] then
    if not now_ms then
      local t = redis.call('TIME')
      now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local by = tonumber(string.match(held[5] or '', ' (%d+)$') or '0')
    restoring = math.max(tonumber(held[4] or '0') or 0, by) > now_ms
    if not restoring then redis.call('HDEL', ckpt_key, p .. ':restoring', p .. ':restoring_by') end
  end
  if cur == expected and (held[2] or '0') == gen and not held[3] and not restoring then
    redis.call('HSET', ckpt_key, p, new)
    out[#out + 1] = {1, cur}
  else
    out[#out + 1] = {0, cur}
  end
end
return out
"""


#: Record a halt next to the checkpoint it holds at: the one Redis holds now (what an operator's write is
#: compared against), not the one the worker knew when it decided. KEYS: checkpoint hash. ARGV: partition,
#: reason.
RECORD_HALT = """
local ckpt_key, partition, reason = KEYS[1], ARGV[1], ARGV[2]
local at = redis.call('HGET', ckpt_key, partition) or '-1'
redis.call('HSET', ckpt_key, partition .. ':halt', reason .. ' ' .. at)
return at
"""

#: Lift a halt the operator answered (wrote the checkpoint), only if it is still the one the worker read; a
#: halt for a re-created log moves the partition's epoch in the same step (see flusher.checkpoints). KEYS:
#: checkpoint hash. ARGV: partition, the halt as read, whether the log is new ('1'). Answers nil when the halt
#: changed meanwhile, else {epoch, checkpoint or -1}.
LIFT_HALT = """
local ckpt_key, partition, halt_read, new_log = KEYS[1], ARGV[1], ARGV[2], ARGV[3] == '1'
if redis.call('HGET', ckpt_key, partition .. ':halt') ~= halt_read then return nil end
redis.call('HDEL', ckpt_key, partition .. ':halt')
local epoch = tonumber(redis.call('HGET', ckpt_key, partition .. ':epoch') or '0')
if new_log then
  epoch = epoch + 1
  redis.call('HSET', ckpt_key, partition .. ':epoch', epoch)
end
return {epoch, tonumber(redis.call('HGET', ckpt_key, partition) or '-1')}
"""

#: Look up one partition's watermarks on many boards (single Redis: the keys span slots, as FLUSH's do; a
#: Redis Cluster sink asks per slot). KEYS: checkpoint hash, then each board's applied hash. ARGV: the
#: checkpoint's field, the watermark field. Answers the checkpoint then each watermark, -1 where absent: one
#: reply per call, where one HGET per board cost a reply each (parsed and awaited in Python).
LOOKUP = """
local ckpt_key, ckpt_field, mark_field = KEYS[1], ARGV[1], ARGV[2]
local out = {redis.call('HGET', ckpt_key, ckpt_field) or -1}
for i = 2, #KEYS do  -- KEYS[i]: a board's applied hash
  out[i] = redis.call('HGET', KEYS[i], mark_field) or -1
end
return out
"""
