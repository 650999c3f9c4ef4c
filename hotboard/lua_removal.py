"""The removal scripts behind ``hotboard boards delete`` and ``erase``: each one atomic step on one board's slot.

Why deleting keeps the watermarks: a worker may hold a window of the board folded before the deletion, and a
replay from Kafka (a restart, a checkpoint written back) brings old events again. Both must be recognised as
applied, or the board would come back holding only part of its old events. So DELETE raises every watermark to
the delete point (the log's end when the command read it, or what was applied if that is further) and keeps
them: a pending window then finds other watermarks than it expects and its worker resynchronises (the fence of
:mod:`hotboard.lua`), and every event at or below the delete point is skipped as a duplicate from then on.
"""

from __future__ import annotations

from hotboard.keys import APPLIED_DELETED_VERSION, META_AS_OF, META_VERSION

#: Delete a board's scores, meta, definition, player meta and aux structures (its index entry is removed right
#: after, by the caller: the index is on a slot of its own, and a script touches one slot); raise its
#: watermarks to the delete point and keep them, with the delete's own version, one past the board's (a board
#: written again goes on from it, so no reader's cache keyed by version serves a page of the deleted board; and
#: an update-then-rank wait that saw the version before the delete never takes the first window after it for the
#: one right after its write, whose event the delete may have removed: reader_api.waits). KEYS: board zset, applied
#: hash, meta hash, definition hash, player meta hash, members hash, dense zset, counts hash.
#: ARGV: the board's name (unused by the script; it names the call in SLOWLOG), then pairs (watermark field,
#: last offset of the log; -1 for an empty partition).
#: Answers {0} for a board that was never there (nothing written), else {status, version, delete point...} with
#: the delete point per pair (-1: no event there yet); status 2: only the watermarks a delete keeps were there
#: (deleted before, not written or declared since), which are raised all the same, so that the point answered
#: holds whichever delete an operator's retry turns out to be; else 1.
DELETE = f"""
local board_key, applied_key, meta_key, def_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pmeta_key, members_key, dense_key, counts_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local content = redis.call('EXISTS', board_key, meta_key, def_key, pmeta_key, members_key, dense_key, counts_key)
local floor = redis.call('HGET', applied_key, '{APPLIED_DELETED_VERSION}')
if content == 0 and redis.call('EXISTS', applied_key) == 0 then return {{0}} end
local status = 1
if content == 0 and floor then status = 2 end
local version = tonumber(redis.call('HGET', meta_key, '{META_VERSION}') or '0')
floor = tonumber(floor or '0')
if floor > version then version = floor end  -- deleted before and not written since
version = version + 1  -- the delete is a step of the board: the version after it, never one a window takes
local out = {{status, version}}
for i = 2, #ARGV, 2 do
  local field, point = ARGV[i], tonumber(ARGV[i + 1])
  local applied = tonumber(redis.call('HGET', applied_key, field) or '-1')
  if applied > point then point = applied end  -- applied past the log end it read: a window landed meanwhile
  if point >= 0 then redis.call('HSET', applied_key, field, point) end
  out[#out + 1] = point
end
redis.call('HSET', applied_key, '{APPLIED_DELETED_VERSION}', version)
redis.call('DEL', board_key, meta_key, def_key, pmeta_key, members_key, dense_key, counts_key)
return out
"""

#: Remove one player from a board: its score, its tie time (``earliest``), its dense count, its display meta;
#: the version moves (readers' caches see the change). KEYS: board zset, meta hash, definition hash, player meta
#: hash, members hash, dense zset, counts hash. ARGV: the player. Answers {0} when the board held nothing of the
#: player, else {1, the stored score or false}.
ERASE = f"""
local board_key, meta_key, def_key, pmeta_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local members_key, dense_key, counts_key = KEYS[5], KEYS[6], KEYS[7]
local player = ARGV[1]
local ties = redis.call('HGET', def_key, 'ties') or 'shared'
local member = player
local found = 0
if ties == 'earliest' then
  member = redis.call('HGET', members_key, player)
  found = redis.call('HDEL', members_key, player)
end
local score = false
if member then
  score = redis.call('ZSCORE', board_key, member)
  if score then
    redis.call('ZREM', board_key, member)
    found = 1
    if ties == 'dense' then
      local s = string.format('%.17g', tonumber(score))
      if redis.call('HINCRBY', counts_key, s, -1) <= 0 then
        redis.call('HDEL', counts_key, s)
        redis.call('ZREM', dense_key, s)
      end
    end
  end
end
found = math.max(found, redis.call('HDEL', pmeta_key, player))
if found == 0 then return {{0}} end
redis.call('HINCRBY', meta_key, '{META_VERSION}', 1)
local t = redis.call('TIME')
redis.call('HSET', meta_key, '{META_AS_OF}', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return {{1, score}}
"""
