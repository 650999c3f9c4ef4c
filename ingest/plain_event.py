"""The usual event's shape, decoded and type-checked in C: the fold's steady path (``fold_batch``) reads it with
one call instead of a parse and a dozen checks in Python.

It is a filter, not a second contract: :mod:`hotboard.codec` (orjson) stays the one definition of validity. The
shape accepts only events the codec accepts with the same values, and refuses everything else, which then takes
the codec's path exactly as before:

- exactly the fields ``player`` and ``delta``, optionally ``board`` and ``ts``: any other field (``op``, ``meta``,
  ``score``, or one the contract ignores) is refused, because msgspec skips an unknown field's value without
  checking it (a string that is not UTF-8, a number like ``1e999`` or nesting past orjson's limit would pass);
- ``delta`` an integer of at most 2^53-1 in magnitude and ``ts`` a non-negative one up to 2^53-1, or null (no bool,
  no float, no integer literal written with a fraction or an exponent);
- a key given twice: the last value counts, as in orjson, but each value is checked as it is read, so
  ``"ts": -1, "ts": 5`` is refused here (and accepted by the codec);
- ``player`` is only a string here: the fold checks a new player's length and characters itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Final

import msgspec

from hotboard.codec import MAX_ABS_DELTA
from hotboard.keys import DEFAULT_BOARD, MAX_EXACT


class PlainEvent(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """``{"board", "player", "delta", "ts"}``: a plain ``incr`` (no op, no meta, no score). Untracked by the
    cyclic GC (``gc=False``): it holds strings and integers only, and lives for one loop iteration."""

    player: str
    delta: Annotated[int, msgspec.Meta(ge=-MAX_ABS_DELTA, le=MAX_ABS_DELTA)]
    board: str = DEFAULT_BOARD
    ts: Annotated[int, msgspec.Meta(ge=0, le=MAX_EXACT)] | None = None


#: One reusable typed decoder (stateless, like a compiled regex); raises on anything outside the shape: msgspec's
#: errors, or TypeError on a tombstone.
decode_plain: Final[Callable[[bytes], PlainEvent]] = msgspec.json.Decoder(PlainEvent).decode
