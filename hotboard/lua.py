"""Every Lua script hotboard runs on Redis, in one place (as arq keeps its Lua in ``lua.py``).

A script runs atomically, so each is a MULTI/EXEC whose first step is a condition (Redis 7 replicates and
AOF-logs its effects wrapped in MULTI/EXEC).
"""

from __future__ import annotations

from hashlib import sha1

from hotboard.keys import MAX_EXACT

#: One board's share of one window: compare-and-set on the board's watermarks, then the deltas, the new
#: watermarks and the meta bump. KEYS: board zset, applied hash, meta hash. ARGV: n, then n triples (field,
#: expected watermark, new watermark), then player/delta pairs.
#: Returns {0, version, saturated} applied; {1} this exact step was applied already (a retry after a lost
#: reply); {-1, current...} fenced: someone else moved a watermark (a new owner, or Redis lost writes).
#: Totals are held at +-MAX_EXACT: beyond 2^53 a double no longer holds every integer.
FLUSH = f"""
local n = tonumber(ARGV[1])
local fenced = false
local already = true
local current = {{}}
for i = 0, n - 1 do
  local cur = redis.call('HGET', KEYS[2], ARGV[2 + 3 * i]) or '-1'
  current[i + 1] = cur
  if cur ~= ARGV[3 + 3 * i] then fenced = true end
  if cur ~= ARGV[4 + 3 * i] then already = false end
end
if fenced then
  if already then return {{1}} end
  table.insert(current, 1, -1)
  return current
end
local board = KEYS[1]
local max = {MAX_EXACT}
local saturated = 0
for i = 2 + 3 * n, #ARGV, 2 do
  local total = tonumber(redis.call('ZINCRBY', board, ARGV[i + 1], ARGV[i]))
  if total > max then
    redis.call('ZADD', board, max, ARGV[i])
    saturated = saturated + 1
  elseif total < -max then
    redis.call('ZADD', board, -max, ARGV[i])
    saturated = saturated + 1
  end
end
local marks = {{}}
for i = 0, n - 1 do
  marks[2 * i + 1] = ARGV[2 + 3 * i]
  marks[2 * i + 2] = ARGV[4 + 3 * i]
end
redis.call('HSET', KEYS[2], unpack(marks))
local version = redis.call('HINCRBY', KEYS[3], 'version', 1)
local t = redis.call('TIME')
redis.call('HSET', KEYS[3], 'as_of', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return {{0, version, saturated}}
"""

#: Advance per-partition checkpoints, each only from the value the worker knows. KEYS: checkpoint hash.
#: ARGV: triples (field, expected, new); expected '-1' means "absent". Returns one {ok, previous} per triple:
#: a mismatch (absent after a FLUSHALL, behind after a lost second, ahead after another owner) is the
#: worker's cue to resynchronise, never overwritten.
CHECKPOINT = """
local out = {}
for i = 1, #ARGV, 3 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i]) or '-1'
  if cur == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    out[#out + 1] = {1, cur}
  else
    out[#out + 1] = {0, cur}
  end
end
return out
"""


def digest(script: str) -> str:
    """The SHA1 Redis files a script under: EVALSHA with it, and SCRIPT LOAD only on NOSCRIPT."""
    return sha1(script.encode()).hexdigest()
