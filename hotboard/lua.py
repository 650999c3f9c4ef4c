"""Every Lua script hotboard runs on Redis, in one place (as arq keeps its Lua in ``lua.py``).

A script runs atomically, so each is a MULTI/EXEC whose first step is a condition (Redis 7 replicates and
AOF-logs its effects wrapped in MULTI/EXEC).
"""

from __future__ import annotations

from hotboard.boards import DEFAULT, TIE_DIGITS
from hotboard.keys import MAX_EXACT, META_AS_OF, META_PERIODS, META_VERSION

#: What every flush script starts with: for one board (its KEYS from ``k + 1``, its ARGV from ``a + 1``),
#: ``fence`` is the compare-and-set on its watermarks, then the definition check; ``commit`` writes the new
#: watermarks and bumps its meta. A board's ARGV: n, then n triples (field, expected watermark, new watermark),
#: the spec the window was folded under, whether a missing definition is seeded with it (1 on a period board:
#: ``B@2026-W49`` keeps a copy of B's), and when its keys expire (ms; 0: never). KEYS: board zset, applied
#: hash, meta hash, definition hash (and the aux structures for APPLY). ``fence`` answers nil and n to go on,
#: or the board's reply: {1} this exact step was applied already (a retry after a lost reply), or the board
#: is a period past its expiry (a replay or a lagging worker: written, it would be deleted at once); {-1,
#: current...} fenced (someone else moved a watermark: a new owner, or Redis lost writes); {-2, spec} the
#: board's definition is not the one the worker folded with. ``commit`` answers {0, version, saturated}.
_PRELUDE = f"""
local max = {MAX_EXACT}
local function fence(k, a)
  local n = tonumber(ARGV[a + 1])
  local expire = tonumber(ARGV[a + 4 + 3 * n])
  if expire > 0 then
    local t = redis.call('TIME')
    if expire <= tonumber(t[1]) * 1000 then return {{1}}, n end  -- a period past its expiry: nothing to keep
  end
  local fenced, already, current, fields = false, true, {{}}, {{}}
  for i = 0, n - 1 do fields[i + 1] = ARGV[a + 2 + 3 * i] end
  local held = {{}}
  if n > 0 then held = redis.call('HMGET', KEYS[k + 2], unpack(fields)) end  -- one call, every partition
  for i = 0, n - 1 do
    local cur = held[i + 1] or '-1'
    current[i + 1] = cur
    if cur ~= ARGV[a + 3 + 3 * i] then fenced = true end
    if cur ~= ARGV[a + 4 + 3 * i] then already = false end
  end
  if fenced then
    if already then return {{1}}, n end
    table.insert(current, 1, -1)
    return current, n
  end
  local want = ARGV[a + 2 + 3 * n]
  local spec = redis.call('HGET', KEYS[k + 4], 'spec')
  if not spec and ARGV[a + 3 + 3 * n] == '1' then
    -- a period board's first window: it keeps a copy of its board's definition (the reads use it)
    spec = want
    local order, operator, ties = string.match(spec, '^(%a+)/(%a+)/(%a+)')
    redis.call('HSET', KEYS[k + 4], 'spec', spec, 'order', order, 'operator', operator, 'ties', ties)
  end
  spec = spec or '{DEFAULT.spec}'
  if spec ~= want then return {{-2, spec}}, n end
  return nil, n
end
local now = nil
local function commit(k, a, n, nkeys, saturated)
  local marks = {{}}
  for i = 0, n - 1 do
    marks[2 * i + 1] = ARGV[a + 2 + 3 * i]
    marks[2 * i + 2] = ARGV[a + 4 + 3 * i]
  end
  redis.call('HSET', KEYS[k + 2], unpack(marks))
  local version = redis.call('HINCRBY', KEYS[k + 3], '{META_VERSION}', 1)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  redis.call('HSET', KEYS[k + 3], '{META_AS_OF}', now)
  local expire = tonumber(ARGV[a + 4 + 3 * n])
  if expire > 0 then
    for j = k + 1, k + nkeys do
      if redis.call('PTTL', KEYS[j]) == -1 then redis.call('PEXPIREAT', KEYS[j], expire) end
    end
  end
  return {{0, version, saturated}}
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
local k, a = 0, 0
while a < #ARGV do
  local early, n = fence(k, a)
  local last = a + 5 + 3 * n + tonumber(ARGV[a + 5 + 3 * n])
  if early then
    out[#out + 1] = early
  else
    local board, saturated = KEYS[k + 1], 0
    for i = a + 6 + 3 * n, last - 1, 2 do
      local total = tonumber(redis.call('ZINCRBY', board, ARGV[i + 1], ARGV[i]))
      if total > max then
        redis.call('ZADD', board, max, ARGV[i])
        saturated = saturated + 1
      elseif total < -max then
        redis.call('ZADD', board, -max, ARGV[i])
        saturated = saturated + 1
      end
    end
    out[#out + 1] = commit(k, a, n, 4, saturated)
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
local early, n = fence(0, 0)
if early then return early end
local board, saturated = KEYS[1], 0
local base = 5 + 3 * n
local mode, desc, dense, sign = ARGV[base], ARGV[base + 1] == 'desc', ARGV[base + 2] == '1', tonumber(ARGV[base + 3])
local stop = base + 5 + tonumber(ARGV[base + 4])
local i = base + 5
local counts = {}
local function hold(x)
  if x > max then saturated = saturated + 1; return max end
  if x < -max then saturated = saturated + 1; return -max end
  return x
end
local function count(score, by)
  counts[score] = (counts[score] or 0) + by  -- keyed by the number: printed once per distinct score, below
end
local function put(p, old, new)
  if old == new then return end
  redis.call('ZADD', board, new, p)
  if dense then
    if old then count(old, -1) end
    count(new, 1)
  end
end
while i < stop do
  local p = ARGV[i]
  if mode == 'steps' then
    local m = redis.call('HGET', KEYS[6], p)
    local v, t = nil, nil
    if m then
      local stored = redis.call('ZSCORE', board, m)
      if stored then v = sign * tonumber(stored); t = string.sub(m, 1, 16) end
    end
    local v0, t0 = v, t
    local k = tonumber(ARGV[i + 1])
    i = i + 2
    for j = 1, k do
      local op, a, ts = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
      i = i + 3
      local nv
      if op == 'incr' then nv = hold((v or 0) + a)
      elseif op == 'decr' then nv = math.max((v or 0) - a, 0)
      elseif op == 'best' and v ~= nil then
        if (desc and a > v) or (not desc and a < v) then nv = a else nv = v end
      else nv = a end
      if v == nil or nv ~= v or op == 'put' then t = ts end
      v = nv
    end
    if v ~= v0 or t ~= t0 then
      local member = t .. p
      if m and m ~= member then redis.call('ZREM', board, m) end
      local stored = sign * v
      if stored == 0 then stored = 0 end
      redis.call('ZADD', board, stored, member)
      if m ~= member then redis.call('HSET', KEYS[6], p, member) end
    end
  else
    local old = redis.call('ZSCORE', board, p)
    if old then old = tonumber(old) end
    local new
    if mode == 'sum' then
      new = hold((old or 0) + tonumber(ARGV[i + 1]))
      i = i + 2
    elseif mode == 'best' then
      new = tonumber(ARGV[i + 1])
      if old and ((desc and old > new) or (not desc and old < new)) then new = old end
      i = i + 2
    else
      if old then
        new = math.min(math.max(old + tonumber(ARGV[i + 1]) + tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])),
                       tonumber(ARGV[i + 4]))
      else
        new = tonumber(ARGV[i + 5])
      end
      new = hold(new)
      i = i + 6
    end
    put(p, old, new)
  end
end
for score, c in pairs(counts) do
  if c ~= 0 then
    local s = string.format('%.17g', score)
    local held = redis.call('HINCRBY', KEYS[8], s, c)
    if held <= 0 then
      redis.call('HDEL', KEYS[8], s)
      redis.call('ZREM', KEYS[7], s)
    elseif held == c then
      redis.call('ZADD', KEYS[7], score, s)
    end
  end
end
for j = stop, #ARGV, 2 do
  redis.call('HSET', KEYS[5], ARGV[j], ARGV[j + 1])
end
return commit(0, 0, n, 8, saturated)
"""
)

#: Advance per-partition checkpoints, each only from the value the worker knows. KEYS: checkpoint hash.
#: ARGV: triples (field, expected, new); expected '-1' means "absent". Returns one {ok, previous} per triple:
#: a mismatch (absent after a FLUSHALL, behind after a lost second, ahead after another owner) is the
#: worker's cue to resynchronise, never overwritten. A halted partition's checkpoint (``<p>:halt`` present)
#: never moves here: while it is halted only an operator writes it, and that write is what lifts the halt.
CHECKPOINT = """
local out = {}
for i = 1, #ARGV, 3 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i]) or '-1'
  if cur == ARGV[i + 1] and redis.call('HEXISTS', KEYS[1], ARGV[i] .. ':halt') == 0 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
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
local at = redis.call('HGET', KEYS[1], ARGV[1]) or '-1'
redis.call('HSET', KEYS[1], ARGV[1] .. ':halt', ARGV[2] .. ' ' .. at)
return at
"""

#: Lift a halt the operator answered (wrote the checkpoint), only if it is still the one the worker read; a
#: halt for a re-created log moves the partition's epoch in the same step (see flusher.checkpoints). KEYS:
#: checkpoint hash. ARGV: partition, the halt as read, whether the log is new ('1'). Answers nil when the halt
#: changed meanwhile, else {epoch, checkpoint or -1}.
LIFT_HALT = """
local p = ARGV[1]
if redis.call('HGET', KEYS[1], p .. ':halt') ~= ARGV[2] then return nil end
redis.call('HDEL', KEYS[1], p .. ':halt')
local epoch = tonumber(redis.call('HGET', KEYS[1], p .. ':epoch') or '0')
if ARGV[3] == '1' then
  epoch = epoch + 1
  redis.call('HSET', KEYS[1], p .. ':epoch', epoch)
end
return {epoch, tonumber(redis.call('HGET', KEYS[1], p) or '-1')}
"""

#: Look up one partition's watermarks on many boards (single Redis: the keys span slots, as FLUSH's do; a
#: Redis Cluster sink asks per slot). KEYS: checkpoint hash, then each board's applied hash. ARGV: the
#: checkpoint's field, the watermark field. Answers the checkpoint then each watermark, -1 where absent: one
#: reply per call, where one HGET per board cost a reply each (parsed and awaited in Python).
LOOKUP = """
local out = {redis.call('HGET', KEYS[1], ARGV[1]) or -1}
local field = ARGV[2]
for i = 2, #KEYS do
  out[i] = redis.call('HGET', KEYS[i], field) or -1
end
return out
"""


# --- reads (reader_api): each answer is one snapshot. Every one answers {exists, total, version, as_of, order,
# ties, ...}; the board's definition is read inside the script, so ranks and the definition belong together. A
# declared board exists before its first window (an empty board, not a 404).

#: The reads' common start. KEYS: board zset, meta hash, def hash, pmeta hash, members hash, dense zset (one hash
#: tag). Ranks follow the definition (layout in hotboard.boards): ``shared`` and ``dense`` are one ZCOUNT of the
#: strictly better scores (on the board or on its distinct scores), never a walk over equal ones; ``lexical``
#: and ``earliest`` are positions. Score bounds are Redis's own score strings ('(' .. s), never a Lua number
#: printed back (tostring keeps 14 digits).
_HEADER = f"""
local total = redis.call('ZCARD', KEYS[1])
local meta = redis.call('HMGET', KEYS[2], '{META_VERSION}', '{META_AS_OF}')
local exists = 1
if total == 0 then exists = math.min(1, redis.call('EXISTS', KEYS[2], KEYS[3])) end
local def = redis.call('HMGET', KEYS[3], 'order', 'ties')
local order, ties = def[1] or 'desc', def[2] or 'shared'
local head = {{exists, total, meta[1], meta[2], order, ties}}
local earliest = ties == 'earliest'
local fair = ties == 'shared' or ties == 'dense'
local rev = order == 'desc' and not earliest
local function position(member)
  if rev then return redis.call('ZREVRANK', KEYS[1], member) end
  return redis.call('ZRANK', KEYS[1], member)
end
local function range(first, last)
  if rev then return redis.call('ZREVRANGE', KEYS[1], first, last, 'WITHSCORES') end
  return redis.call('ZRANGE', KEYS[1], first, last, 'WITHSCORES')
end
local function rank_of(pos, s)
  if not fair then return pos + 1 end
  local key = KEYS[1]
  if ties == 'dense' then key = KEYS[6] end
  if rev then return redis.call('ZCOUNT', key, '(' .. s, '+inf') + 1 end
  return redis.call('ZCOUNT', key, '-inf', '(' .. s) + 1
end
local function metas(players)
  if #players == 0 or redis.call('EXISTS', KEYS[4]) == 0 then return {{}} end
  return redis.call('HMGET', KEYS[4], unpack(players))
end
local function page(first, flat)
  local players, scores, ranks = {{}}, {{}}, {{}}
  local rank, prev = 0, nil
  for n = 1, #flat / 2 do
    local member, s = flat[2 * n - 1], flat[2 * n]
    if earliest then member = member:sub({TIE_DIGITS + 1}) end
    if n == 1 then rank = rank_of(first, s)
    elseif not fair or (ties == 'shared' and s ~= prev) then rank = first + n
    elseif ties == 'dense' and s ~= prev then rank = rank + 1 end
    players[n], scores[n], ranks[n], prev = member, s, rank, s
  end
  return {{players, scores, ranks, metas(players)}}
end
local function member_of(player)
  if earliest then return redis.call('HGET', KEYS[5], player) end
  return player
end
"""

#: ARGV: offset, limit, version the caller has cached ('' = none). Answers {2} when that version is current,
#: so a cache hit costs one small round trip and a miss still costs only one. Adds the page: {players, stored
#: scores, ranks, metas} (metas empty when no player has any).
TOP = f"""
if ARGV[3] ~= '' and redis.call('HGET', KEYS[2], '{META_VERSION}') == ARGV[3] then return {{2}} end
{_HEADER}
local offset = tonumber(ARGV[1])
local flat = {{}}
if offset < total then flat = range(offset, offset + tonumber(ARGV[2]) - 1) end
head[7] = page(offset, flat)
return head
"""

#: ARGV: player. Adds {rank, stored score, meta} when the player is on the board.
PLAYER = f"""
{_HEADER}
local member = member_of(ARGV[1])
local s = member and redis.call('ZSCORE', KEYS[1], member)
if not s then return head end
local pos = false
if not fair then pos = position(member) end
head[7], head[8], head[9] = rank_of(pos, s), s, redis.call('HGET', KEYS[4], ARGV[1])
return head
"""

#: ARGV: player, radius. Adds {first position, page} when the player is on the board.
AROUND = f"""
{_HEADER}
local member = member_of(ARGV[1])
local pos = member and position(member)
if not pos then return head end
local radius = tonumber(ARGV[2])
local first = pos - radius
if first < 0 then first = 0 end
head[7], head[8] = first, page(first, range(first, pos + radius))
return head
"""

#: ARGV: player ids. Adds {ids, stored scores, ranks, metas}, parallel to ARGV (nil where not on the board).
PLAYERS = f"""
{_HEADER}
local members = ARGV
if earliest then members = redis.call('HMGET', KEYS[5], unpack(ARGV)) end
local ranks, scores = {{}}, {{}}
for i = 1, #ARGV do
  local s = members[i] and redis.call('ZSCORE', KEYS[1], members[i])
  ranks[i], scores[i] = false, false
  if s then
    local pos = false
    if not fair then pos = position(members[i]) end
    ranks[i], scores[i] = rank_of(pos, s), s
  end
end
head[7] = {{ARGV, scores, ranks, metas(ARGV)}}
return head
"""

#: What ``GET /v1/boards/{{board}}`` shows, from one snapshot. KEYS: board zset, meta hash, def hash.
#: Answers {exists, total, version, as_of, declared, stored spec or nil}.
BOARD = f"""
local total = redis.call('ZCARD', KEYS[1])
local meta = redis.call('HMGET', KEYS[2], '{META_VERSION}', '{META_AS_OF}')
local exists = 1
if total == 0 then exists = redis.call('EXISTS', KEYS[2]) end
return {{exists, total, meta[1], meta[2], redis.call('EXISTS', KEYS[3]), redis.call('HGET', KEYS[3], 'spec')}}
"""


#: The first line of every script that only reads (the read API's): Redis then refuses any write it attempts,
#: whatever the user's ACL allows (Redis 7 script flags).
NO_WRITES = "#!lua flags=no-writes\n"


# --- board definitions (hotboard.board_store)

#: Declare a board. KEYS: def hash, board zset, meta hash (one hash tag: the board index, in its own slot, is
#: written after it). ARGV: spec, order, operator, ties, created ms, default spec, reset, keep, grace_ms. A board
#: is "written" once its sorted set or meta hash exists (a window was applied; a seasonal board's meta hash is
#: marked when its first period is): from then on its definition (declared, or the default) cannot change.
#: Returns {'created'|'unchanged'|'replaced', stored spec} or {'refused', stored spec}.
DEFINE = """
local stored = redis.call('HGET', KEYS[1], 'spec')
local current = stored or ARGV[6]
if stored == ARGV[1] then return {'unchanged', stored} end
local written = redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1
if written and current ~= ARGV[1] then return {'refused', current} end
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'order', ARGV[2], 'operator', ARGV[3], 'ties', ARGV[4],
           'created', ARGV[5], 'reset', ARGV[7], 'keep', ARGV[8], 'grace_ms', ARGV[9])
if stored then return {'replaced', stored} end
return {'created', current}
"""


#: Mark a seasonal board written (its first period is about to be), only if its stored definition is the one
#: the window was folded under. KEYS: meta hash, definition hash (one slot). ARGV: the spec. Returns the stored
#: spec (the default's when undeclared).
MARK_SEASONAL = f"""
local spec = redis.call('HGET', KEYS[2], 'spec') or '{DEFAULT.spec}'
if spec == ARGV[1] then redis.call('HSETNX', KEYS[1], '{META_PERIODS}', 1) end
return spec
"""
