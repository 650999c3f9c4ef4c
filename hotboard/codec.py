"""The event contract: one Kafka record value -> one validated score event, or a reason it is invalid.

This runs once per event on the hot path, so it returns a plain tuple and caches board names it has
already validated; everything else is a handful of type checks after one orjson parse.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

import orjson

from hotboard.keys import DEFAULT_BOARD, is_valid_board, is_valid_player

MAX_VALUE_BYTES = 64 * 1024
MAX_ABS_DELTA = 2**53 - 1
#: The only operator today. ``op`` is reserved in the contract: ``set``/``best`` arrive in a later issue,
#: and until then a record asking for one is rejected rather than silently summed.
OP_INCR = "incr"


class Reason(StrEnum):
    """Why a record went to the dead-letter topic. A small fixed set: it is also a metric label."""

    TOO_LARGE = "too_large"
    BAD_UTF8 = "bad_utf8"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING_FIELD = "missing_field"
    BAD_TYPE = "bad_type"
    BAD_VALUE = "bad_value"
    UNSUPPORTED_OP = "unsupported_op"
    #: The client could not parse the record itself (e.g. a header name that is not UTF-8); or validation met
    #: something it did not expect. The record is dead-lettered with what could be read of it.
    UNREADABLE = "unreadable"


class InvalidEvent(ValueError):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class Event(NamedTuple):
    board: str
    player: str
    delta: int
    ts_ms: int | None


#: The decoded fields of one event, as the hot path uses them: (board, player, delta, ts_ms).
Fields = tuple[str, str, int, int | None]


class Decoder:
    """Validates records one by one, naming the first rule an invalid one breaks. The fold's fast path
    (:meth:`ingest.window.PartitionFold.fold_batch`) accepts the common well-formed event itself and sends
    everything else here; this is the one definition of what is valid."""

    __slots__ = ("_max_known", "known_boards")

    def __init__(self, max_known_boards: int = 65_536) -> None:
        #: Boards already validated (the fast path's set lookup instead of the regex); bounded.
        self.known_boards: set[str] = set()
        self._max_known = max_known_boards

    def fields(self, value: bytes | None) -> Fields:
        """``(board, player, delta, ts_ms)`` of a valid event; raises :class:`InvalidEvent`, and nothing else."""
        try:
            return self._fields(value)
        except InvalidEvent:
            raise
        except Exception as exc:  # noqa: BLE001 - no record, however odd, may escape the contract as a crash
            raise InvalidEvent(Reason.UNREADABLE, f"validation failed: {type(exc).__name__}") from None

    def _fields(self, value: bytes | None) -> Fields:
        if value is None or len(value) > MAX_VALUE_BYTES:
            raise _reject_raw(value)
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise _reject_raw(value, exc) from None
        board, player, delta, ts = _validate(obj)
        if board not in self.known_boards and len(self.known_boards) < self._max_known:
            self.known_boards.add(board)
        return board, player, delta, ts

    def decode(self, value: bytes | None) -> Event:
        """Parse and validate one record value; raises :class:`InvalidEvent` with a readable reason."""
        return Event(*self.fields(value))


def decode(value: bytes | None) -> Event:
    """One-off decode without the board cache (tests, tools)."""
    return Decoder().decode(value)


def _reject_raw(value: bytes | None, exc: Exception | None = None) -> InvalidEvent:
    if value is None:
        return InvalidEvent(Reason.NOT_JSON, "record has no value (tombstone)")
    if len(value) > MAX_VALUE_BYTES:
        return InvalidEvent(Reason.TOO_LARGE, f"value is {len(value)} bytes, limit {MAX_VALUE_BYTES}")
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return InvalidEvent(Reason.BAD_UTF8, "value is not valid UTF-8")
    return InvalidEvent(Reason.NOT_JSON, f"value is not JSON: {exc}")


def _validate(obj: object) -> Fields:
    """The slow path: every rule of the contract, in order, with the reason of the first one broken."""
    if type(obj) is not dict:
        raise InvalidEvent(Reason.NOT_OBJECT, f"value must be a JSON object, got {type(obj).__name__}")

    op = obj.get("op", OP_INCR)
    if op != OP_INCR:
        raise InvalidEvent(Reason.UNSUPPORTED_OP, f"op {_describe(op)} is not supported (only 'incr')")

    board = obj.get("board", DEFAULT_BOARD)
    if type(board) is not str:
        raise InvalidEvent(Reason.BAD_TYPE, f"board must be a string, got {type(board).__name__}")
    if not is_valid_board(board):
        raise InvalidEvent(Reason.BAD_VALUE, "board must be 1-64 characters of A-Z a-z 0-9 _ . : -")

    player = obj.get("player")
    if player is None:
        raise InvalidEvent(Reason.MISSING_FIELD, "player is required")
    if type(player) is not str:
        raise InvalidEvent(Reason.BAD_TYPE, f"player must be a string, got {type(player).__name__}")
    if not is_valid_player(player):
        raise InvalidEvent(Reason.BAD_VALUE, "player must be 1-128 characters without control characters")

    delta = obj.get("delta")
    if delta is None:
        raise InvalidEvent(Reason.MISSING_FIELD, "delta is required")
    if type(delta) is not int:
        raise InvalidEvent(Reason.BAD_TYPE, f"delta must be an integer, got {type(delta).__name__}")
    if not -MAX_ABS_DELTA <= delta <= MAX_ABS_DELTA:
        raise InvalidEvent(Reason.BAD_VALUE, "|delta| must be at most 2^53-1")

    ts = obj.get("ts")
    if ts is not None and (type(ts) is not int or ts < 0):
        raise InvalidEvent(Reason.BAD_TYPE, "ts must be a non-negative integer (ms since the epoch)")
    return board, player, delta, ts


def _describe(value: object) -> str:
    """A bounded, non-recursive description of an arbitrary JSON value for an error message: repr() of a
    value nested 1,000 deep raises RecursionError, and of a large one makes a large header."""
    if type(value) is str:
        return repr(value) if len(value) <= 32 else f"{value[:32]!r}... ({len(value)} characters)"
    if type(value) in (int, float, bool) or value is None:
        return repr(value)[:40]
    return f"of type {type(value).__name__}"


def encode(event: Event) -> bytes:
    """The producer side of the contract (load generator, tests)."""
    body: dict[str, object] = {"board": event.board, "player": event.player, "delta": event.delta}
    if event.ts_ms is not None:
        body["ts"] = event.ts_ms
    return orjson.dumps(body)
