"""The read API's Lua scripts: each answer is one snapshot.

Every one answers {exists, total, version, as_of, order, ties, ...}; the board's definition is read inside the
script, so ranks and the definition belong together. A declared board exists before its first window (an empty
board, not a 404). Each starts with :data:`NO_WRITES`, then names its KEYS and ARGV.
"""

from __future__ import annotations

from hotboard.boards import TIE_DIGITS
from hotboard.keys import APPLIED_DELETED_VERSION, META_AS_OF, META_VERSION

#: The first line of every script that only reads: Redis then refuses any write it attempts, whatever the
#: user's ACL allows (Redis 7 script flags).
NO_WRITES = "#!lua flags=no-writes\n"

#: The KEYS of every read but BOARD: board zset, meta hash, def hash, player meta hash, members hash, dense zset
#: (one hash tag).
_KEYS = """
local board_key, meta_key, def_key = KEYS[1], KEYS[2], KEYS[3]
local pmeta_key, members_key, dense_key = KEYS[4], KEYS[5], KEYS[6]
"""

#: The reads' common start: the board's header and definition, and how to rank on it. Ranks follow the
#: definition (layout in hotboard.boards): ``shared`` and ``dense`` are one ZCOUNT of the strictly better
#: scores (on the board or on its distinct scores), never a walk over equal ones; ``lexical`` and ``earliest``
#: are positions. Score bounds are Redis's own score strings ('(' .. s), never a Lua number printed back
#: (tostring keeps 14 digits).
_HEADER = f"""
local total = redis.call('ZCARD', board_key)
local meta = redis.call('HMGET', meta_key, '{META_VERSION}', '{META_AS_OF}')
local exists = 1
if total == 0 then exists = math.min(1, redis.call('EXISTS', meta_key, def_key)) end
local def = redis.call('HMGET', def_key, 'order', 'ties')
local order, ties = def[1] or 'desc', def[2] or 'shared'
local head = {{exists, total, meta[1], meta[2], order, ties}}
local earliest = ties == 'earliest'
local fair = ties == 'shared' or ties == 'dense'
local rev = order == 'desc' and not earliest
local function position(member)
  if rev then return redis.call('ZREVRANK', board_key, member) end
  return redis.call('ZRANK', board_key, member)
end
local function range(first, last)
  if rev then return redis.call('ZREVRANGE', board_key, first, last, 'WITHSCORES') end
  return redis.call('ZRANGE', board_key, first, last, 'WITHSCORES')
end
local function rank_of(pos, s)
  if not fair then return pos + 1 end
  local key = board_key
  if ties == 'dense' then key = dense_key end
  if rev then return redis.call('ZCOUNT', key, '(' .. s, '+inf') + 1 end
  return redis.call('ZCOUNT', key, '-inf', '(' .. s) + 1
end
local function metas(players)
  if #players == 0 or redis.call('EXISTS', pmeta_key) == 0 then return {{}} end
  return redis.call('HMGET', pmeta_key, unpack(players))
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
  if earliest then return redis.call('HGET', members_key, player) end
  return player
end
"""

#: ARGV: offset, limit, version the caller has cached ('' = none). Answers {2} when that version is current,
#: so a cache hit costs one small round trip and a miss still costs only one. Adds the page: {players, stored
#: scores, ranks, metas} (metas empty when no player has any).
TOP = f"""{NO_WRITES}{_KEYS}
local offset, limit, cached = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if cached ~= '' and redis.call('HGET', meta_key, '{META_VERSION}') == cached then return {{2}} end
{_HEADER}
local flat = {{}}
if offset < total then flat = range(offset, offset + limit - 1) end
head[7] = page(offset, flat)
return head
"""

#: One player's answer, as ``answer(player)``: the header, then {rank, stored score, meta} when the player is on
#: the board.
_PLAYER = f"""
{_HEADER}
local function answer(player)
  local reply = {{unpack(head)}}
  local member = member_of(player)
  local s = member and redis.call('ZSCORE', board_key, member)
  if not s then return reply end
  local pos = false
  if not fair then pos = position(member) end
  reply[7], reply[8], reply[9] = rank_of(pos, s), s, redis.call('HGET', pmeta_key, player)
  return reply
end
"""

#: ARGV: player. Adds {rank, stored score, meta} when the player is on the board.
PLAYER = f"""{NO_WRITES}{_KEYS}{_PLAYER}return answer(ARGV[1])
"""

#: ARGV: player, radius. Adds {first position, page} when the player is on the board.
AROUND = f"""{NO_WRITES}{_KEYS}
local player, radius = ARGV[1], tonumber(ARGV[2])
{_HEADER}
local member = member_of(player)
local pos = member and position(member)
if not pos then return head end
local first = pos - radius
if first < 0 then first = 0 end
head[7], head[8] = first, page(first, range(first, pos + radius))
return head
"""

#: ARGV: player ids. Adds {ids, stored scores, ranks, metas}, parallel to the ids (nil where not on the board).
PLAYERS = f"""{NO_WRITES}{_KEYS}
local ids = ARGV
{_HEADER}
local members = ids
if earliest then members = redis.call('HMGET', members_key, unpack(ids)) end
local ranks, scores = {{}}, {{}}
for i = 1, #ids do
  local s = members[i] and redis.call('ZSCORE', board_key, members[i])
  ranks[i], scores[i] = false, false
  if s then
    local pos = false
    if not fair then pos = position(members[i]) end
    ranks[i], scores[i] = rank_of(pos, s), s
  end
end
head[7] = {{ids, scores, ranks, metas(ids)}}
return head
"""

#: What ``GET /v1/boards/{{board}}`` shows, from one snapshot. Answers {exists, total, version, as_of, declared,
#: stored spec or nil}.
BOARD = f"""{NO_WRITES}
local board_key, meta_key, def_key = KEYS[1], KEYS[2], KEYS[3]
local total = redis.call('ZCARD', board_key)
local meta = redis.call('HMGET', meta_key, '{META_VERSION}', '{META_AS_OF}')
local exists = 1
if total == 0 then exists = redis.call('EXISTS', meta_key) end
return {{exists, total, meta[1], meta[2], redis.call('EXISTS', def_key), redis.call('HGET', def_key, 'spec')}}
"""

#: The waits' poll (read API): a board's version and watermarks from one snapshot, so "not covered at version
#: v" is a fact about v, and the players of the update-then-rank waits it covers, read in that same snapshot
#: (a window landing after the poll cannot slip in before their read). A board without meta has the version
#: its next window goes on from (the commit in :mod:`hotboard.lua`): the one it had when it was deleted, else 0
#: (never written), so that first window is v + 1 like any other. KEYS: those of PLAYER, then the applied hash.
#: ARGV: n, n watermark fields, then triples (player, the field's place 1..n, offset). Answers {version,
#: n marks (false where absent), then per triple PLAYER's reply when the mark covers the offset, else false}.
MARKS = f"""{NO_WRITES}{_KEYS}
local applied_key, n = KEYS[7], tonumber(ARGV[1])
local version = redis.call('HGET', meta_key, '{META_VERSION}')
  or redis.call('HGET', applied_key, '{APPLIED_DELETED_VERSION}') or '0'
local out = {{version}}
local marks = {{}}
if n > 0 then marks = redis.call('HMGET', applied_key, unpack(ARGV, 2, n + 1)) end
for i = 1, n do out[i + 1] = marks[i] end
if #ARGV == n + 1 then return out end
{_PLAYER}
for t = n + 2, #ARGV, 3 do
  local player, place, offset = ARGV[t], tonumber(ARGV[t + 1]), tonumber(ARGV[t + 2])
  local mark, reply = marks[place], false
  if mark and tonumber(mark) >= offset then reply = answer(player) end
  out[#out + 1] = reply
end
return out
"""
