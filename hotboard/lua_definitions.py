"""The board definitions' Lua scripts: declare one (:mod:`hotboard.board_store`), and check the one a seasonal
window was folded under before its first period is written (the flusher's registry)."""

from __future__ import annotations

from hotboard.boards import DEFAULT
from hotboard.keys import META_PERIODS

#: Declare a board. KEYS: def hash, board zset, meta hash (one hash tag: the board index, in its own slot, is
#: written after it). ARGV: spec, order, operator, ties, created ms, default spec, reset, keep, grace_ms. A board
#: is "written" once its sorted set or meta hash exists (a window was applied; a seasonal board's meta hash is
#: marked when its first period is): from then on its definition (declared, or the default) cannot change.
#: Returns {'created'|'unchanged'|'replaced', stored spec} or {'refused', stored spec}.
DEFINE = """
local def_key, board_key, meta_key = KEYS[1], KEYS[2], KEYS[3]
local spec, order, operator, ties, created, default = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local reset, keep, grace_ms = ARGV[7], ARGV[8], ARGV[9]
local stored = redis.call('HGET', def_key, 'spec')
local current = stored or default
if stored == spec then return {'unchanged', stored} end
local written = redis.call('EXISTS', board_key) == 1 or redis.call('EXISTS', meta_key) == 1
if written and current ~= spec then return {'refused', current} end
redis.call('HSET', def_key, 'spec', spec, 'order', order, 'operator', operator, 'ties', ties,
           'created', created, 'reset', reset, 'keep', keep, 'grace_ms', grace_ms)
if stored then return {'replaced', stored} end
return {'created', current}
"""


#: Mark a seasonal board written (its first period is about to be), only if its stored definition is the one
#: the window was folded under. KEYS: meta hash, definition hash (one slot). ARGV: the spec. Returns the stored
#: spec (the default's when undeclared).
MARK_SEASONAL = f"""
local meta_key, def_key, want = KEYS[1], KEYS[2], ARGV[1]
local spec = redis.call('HGET', def_key, 'spec') or '{DEFAULT.spec}'
if spec == want then redis.call('HSETNX', meta_key, '{META_PERIODS}', 1) end
return spec
"""
