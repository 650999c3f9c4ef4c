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
- ``player`` is only a string here, and ``board`` one too: their users check them (a new player's length and
  characters, a board against the boards the codec validated before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Final

import msgspec

from hotboard.codec import MAX_ABS_DELTA, MAX_VALUE_BYTES, Decoded, Decoder, InvalidEvent
from hotboard.keys import DEFAULT_BOARD, MAX_EXACT, is_valid_player
from hotboard.records import Record


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


def decode_all(records: Iterable[Record], decoder: Decoder) -> list[Decoded]:
    """:func:`hotboard.codec.decode_all` (what the checked fold reads) with the usual shape of a board the codec
    validated before (``decoder.known_boards``) read by the typed decoder; the same fields or reasons."""
    known, fields, max_bytes = decoder.known_boards, decoder.fields, MAX_VALUE_BYTES
    out: list[Decoded] = []
    for record in records:
        value = record.value
        if value is not None:  # a tombstone goes straight to the codec, which says why it is invalid
            try:
                event = decode_plain(value)
                if event.board in known and len(value) <= max_bytes and is_valid_player(event.player):
                    out.append((event.board, event.player, None, event.delta, None, event.ts, None))
                    continue
            except Exception:  # noqa: BLE001 - outside the shape: the codec reads it and says why
                pass
        try:
            out.append(fields(value))
        except InvalidEvent as exc:
            out.append(exc)
    return out
