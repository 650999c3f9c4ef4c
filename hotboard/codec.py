"""The event contract: one Kafka record value -> one validated score event, or a reason it is invalid.

This runs once per event on the hot path, so it returns a plain tuple and caches board names it has
already validated; everything else is a handful of type checks after one orjson parse.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from enum import StrEnum
from typing import Final, NamedTuple

import orjson

from hotboard.boards import BoardDef, DefinitionError
from hotboard.keys import DEFAULT_BOARD, MAX_EXACT, is_valid_board, is_valid_player
from hotboard.records import Record

MAX_VALUE_BYTES = 64 * 1024
#: Largest magnitude of a delta, a score and an event time: a Redis score (and a Lua number) is an IEEE double,
#: exact for every integer only up to 2^53. Beyond it an event is dead-lettered as ``out_of_range``.
MAX_ABS_DELTA = MAX_EXACT
#: Largest ``meta`` object, encoded (compact JSON).
MAX_META_BYTES = 512
#: Deepest ``meta`` (the object itself is level 1). orjson encodes at most 254 levels and every API answer wraps
#: meta in levels of its own, so a meta near that limit would make each page holding its player unencodable.
MAX_META_DEPTH = 32
OP_INCR = "incr"
#: Longest detail of a dead letter quoting why its board's stored definition is unreadable.
MAX_DETAIL_CHARS = 300
#: operator -> the field carrying its amount.
AMOUNT_FIELD = {"incr": "delta", "decr": "delta", "set": "score", "best": "score"}


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
    #: A delta, score or event time beyond +-(2^53 - 1), which no stored score holds exactly.
    OUT_OF_RANGE = "out_of_range"
    #: The board's stored definition (``hb:{B}:def``) is not one hotboard wrote: its events wait in the DLQ.
    BAD_DEFINITION = "bad_definition"
    #: A seasonal board's event whose record was written after its period closed (end + grace).
    PERIOD_CLOSED = "period_closed"
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
    #: incr/decr amount; None on set/best events (they carry ``score``).
    delta: int | None
    ts_ms: int | None
    #: The operator asked for; None: the board's own.
    op: str | None = None
    score: int | None = None
    #: Display metadata, compact JSON of an object (at most MAX_META_BYTES).
    meta: bytes | None = None


#: The decoded fields of one event, as the fold uses them: (board, player, op, delta, score, ts_ms, meta).
Fields = tuple[str, str, str | None, int | None, int | None, int | None, bytes | None]
#: Index of ``ts_ms`` in :data:`Fields`.
TS: Final = 5


class Decoder:
    """Validates records one by one, naming the first rule an invalid one breaks. The fold's fast path
    (:meth:`ingest.folds.PartitionFold.fold_batch`) accepts the common well-formed event itself and sends
    everything else here; this is the one definition of what is valid."""

    __slots__ = ("_max_known", "known_boards")

    def __init__(self, max_known_boards: int = 65_536) -> None:
        #: Boards already validated (the fast path's set lookup instead of the regex); bounded.
        self.known_boards: set[str] = set()
        self._max_known = max_known_boards

    def fields(self, value: bytes | None) -> Fields:
        """The :data:`Fields` of a valid event; raises :class:`InvalidEvent`, and nothing else."""
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
        fields = _validate(obj, self.known_boards)
        board = fields[0]
        if board not in self.known_boards and len(self.known_boards) < self._max_known:
            self.known_boards.add(board)
        return fields

    def decode(self, value: bytes | None) -> Event:
        """Parse and validate one record value; raises :class:`InvalidEvent` with a readable reason."""
        board, player, op, delta, score, ts, meta = self.fields(value)
        return Event(board, player, delta, ts, op, score, meta)


def decode(value: bytes | None) -> Event:
    """One-off decode without the board cache (tests, tools)."""
    return Decoder().decode(value)


#: One record's fields, or why it is invalid.
Decoded = Fields | InvalidEvent


def decode_all(records: Iterable[Record], decoder: Decoder) -> list[Decoded]:
    """Every record through the codec once: the checked fold and the watermark lookup share the result."""
    out: list[Decoded] = []
    for record in records:
        try:
            out.append(decoder.fields(record.value))
        except InvalidEvent as exc:
            out.append(exc)
    return out


def boards_to_check(decoded: Iterable[Decoded], known: Collection[str]) -> set[str]:
    """Valid boards in ``decoded`` whose watermark this partition has not looked up yet."""
    return {f[0] for f in decoded if type(f) is tuple and f[0] not in known}


def first_ts(records: Sequence[Record], done: int, decoder: Decoder) -> int | None:
    """The event time of the first valid record among ``records[:done]``."""
    for i in range(done):
        try:
            return decoder.fields(records[i].value)[TS]
        except InvalidEvent:
            continue
    return None


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


def _validate(obj: object, known_boards: Collection[str] = ()) -> Fields:
    """The slow path: every rule of the contract, in order, with the reason of the first one broken.
    ``known_boards`` passed these rules before: their names skip the regex."""
    if type(obj) is not dict:
        raise InvalidEvent(Reason.NOT_OBJECT, f"value must be a JSON object, got {type(obj).__name__}")

    op = obj.get("op")
    if op is not None and (type(op) is not str or op not in AMOUNT_FIELD):
        raise InvalidEvent(Reason.UNSUPPORTED_OP, f"op {_describe(op)} is not one of {', '.join(AMOUNT_FIELD)}")

    board = obj.get("board", DEFAULT_BOARD)
    if type(board) is not str:
        raise InvalidEvent(Reason.BAD_TYPE, f"board must be a string, got {type(board).__name__}")
    if board not in known_boards and not is_valid_board(board):
        raise InvalidEvent(Reason.BAD_VALUE, "board must be 1-64 characters of A-Z a-z 0-9 _ . : -")

    player = obj.get("player")
    if player is None:
        raise InvalidEvent(Reason.MISSING_FIELD, "player is required")
    if type(player) is not str:
        raise InvalidEvent(Reason.BAD_TYPE, f"player must be a string, got {type(player).__name__}")
    if not is_valid_player(player):
        raise InvalidEvent(Reason.BAD_VALUE, "player must be 1-128 characters without control characters")

    delta, score = _integer(obj, "delta"), _integer(obj, "score")
    if op is not None:
        resolve(op, delta, score)  # the amount its own op needs; the board's operator is checked at fold time
    elif delta is None and score is None:
        raise InvalidEvent(Reason.MISSING_FIELD, "delta (incr, decr) or score (set, best) is required")

    ts = obj.get("ts")
    if ts is not None:
        if type(ts) is not int or ts < 0:
            raise InvalidEvent(Reason.BAD_TYPE, "ts must be a non-negative integer (ms since the epoch)")
        if ts > MAX_EXACT:
            raise InvalidEvent(Reason.OUT_OF_RANGE, "ts must be at most 2^53-1 ms")
    return board, player, op, delta, score, ts, _meta(obj.get("meta"))


def _integer(obj: dict[str, object], name: str) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if type(value) is not int:
        if type(value) is float and value.is_integer() and abs(value) > MAX_ABS_DELTA:
            # an integer literal past 2^64, which orjson reads as a float
            raise InvalidEvent(Reason.OUT_OF_RANGE, f"|{name}| must be at most 2^53-1 (exact in a Redis score)")
        raise InvalidEvent(Reason.BAD_TYPE, f"{name} must be an integer, got {type(value).__name__}")
    if not -MAX_ABS_DELTA <= value <= MAX_ABS_DELTA:
        raise InvalidEvent(Reason.OUT_OF_RANGE, f"|{name}| must be at most 2^53-1 (exact in a Redis score)")
    return value


def _meta(meta: object) -> bytes | None:
    if meta is None:
        return None
    if type(meta) is not dict:
        raise InvalidEvent(Reason.BAD_TYPE, f"meta must be a JSON object, got {type(meta).__name__}")
    try:
        encoded = orjson.dumps(meta)
    except orjson.JSONEncodeError:  # orjson's own limit: past 254 levels
        raise _too_deep() from None
    if len(encoded) > MAX_META_BYTES:
        raise InvalidEvent(Reason.TOO_LARGE, f"meta is {len(encoded)} bytes encoded, limit {MAX_META_BYTES}")
    if _deeper_than(meta, MAX_META_DEPTH):  # after the size check: the walk covers at most 512 bytes of JSON
        raise _too_deep()
    return encoded


def _too_deep() -> InvalidEvent:
    limit = MAX_META_DEPTH
    return InvalidEvent(Reason.TOO_LARGE, f"meta is nested more than {limit} levels deep, limit {limit}")


def _deeper_than(value: dict[str, object], limit: int) -> bool:
    """Whether a decoded JSON object nests objects/arrays more than ``limit`` levels (``value`` is level 1);
    iterative, so no depth can overflow the interpreter's stack."""
    stack: list[tuple[dict[str, object] | list[object], int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if type(node) is dict else node
        stack.extend((child, depth + 1) for child in children if type(child) is dict or type(child) is list)
    return False


def resolve(operator: str, delta: int | None, score: int | None) -> int:
    """The amount ``operator`` applies (its field, checked); raises InvalidEvent when it is missing or, for a
    decr, negative. Called with the event's own op, or the board's operator when the event has none."""
    field = AMOUNT_FIELD[operator]
    amount = delta if field == "delta" else score
    if amount is None:
        raise InvalidEvent(Reason.MISSING_FIELD, f"{field} is required for {operator}")
    if operator == "decr" and amount < 0:
        raise InvalidEvent(Reason.BAD_VALUE, f"decr takes a delta >= 0, got {amount}")
    return amount


def against(
    definition: BoardDef | DefinitionError, op: str | None, delta: int | None, score: int | None
) -> tuple[BoardDef, str, int]:
    """A valid event checked against its board: the definition, the operator (the event's own ``op``, else the
    board's) and the amount it applies; raises InvalidEvent (``bad_definition`` for a stored definition that
    cannot be read, else as :func:`resolve`). The worker's fold and the write API judge an event by this one."""
    if isinstance(definition, DefinitionError):
        raise InvalidEvent(Reason.BAD_DEFINITION, str(definition)[:MAX_DETAIL_CHARS])
    operator = op or definition.operator
    return definition, operator, resolve(operator, delta, score)


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
    body: dict[str, object] = {"board": event.board, "player": event.player}
    if event.delta is not None:
        body["delta"] = event.delta
    if event.ts_ms is not None:
        body["ts"] = event.ts_ms
    if event.op is not None:
        body["op"] = event.op
    if event.score is not None:
        body["score"] = event.score
    if event.meta is not None:
        body["meta"] = orjson.Fragment(event.meta)
    return orjson.dumps(body)
