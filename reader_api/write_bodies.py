"""Write request bodies -> Kafka records, each item validated by the worker's own codec (:mod:`hotboard.codec`)
and then against its board's definition as the worker's fold checks it (:func:`hotboard.codec.against`), so the
API accepts what a worker would fold and rejects, by index and codec reason, what it would dead-letter. Pure: no
I/O (the caller reads the definitions), tested by tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from hotboard.boards import BoardDef, DefinitionError
from hotboard.codec import Decoder, Fields, InvalidEvent, against
from reader_api.answers import Rejection
from reader_api.errors import ApiError

MAX_EVENTS = 1000
JSON_TYPES = frozenset({"application/json"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl"})
#: The fields the single-score route takes from its body; the board and player come from the path.
SCORE_FIELDS = frozenset({"delta", "op", "score", "meta"})


@dataclass(slots=True)
class Parsed:
    #: (index in the body, Kafka key, Kafka value) of every valid event.
    records: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    #: index -> the codec's fields of each valid event.
    fields: dict[int, Fields] = field(default_factory=dict)

    def boards(self) -> set[str]:
        """The boards of the valid events: the definitions :func:`judge` needs."""
        return {fields[0] for fields in self.fields.values()}


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _bad(code: str, message: str, status: int = 400) -> ApiError:
    return ApiError(status, code, message)


def _too_many(count: int) -> ApiError:
    return _bad("too_many_events", f"{count} events in one request, at most {MAX_EVENTS}", 413)


def _items(body: bytes, kind: str) -> list[bytes]:
    """The raw JSON of each event: a JSON array's elements re-encoded, or NDJSON's non-blank lines."""
    if kind in NDJSON_TYPES:
        lines = [line for line in body.split(b"\n") if line.strip()]
        if len(lines) > MAX_EVENTS:
            raise _too_many(len(lines))
        return [line.rstrip(b"\r") for line in lines]
    if kind not in JSON_TYPES:
        raise _bad(
            "unsupported_media_type",
            "send application/json (an array of events) or application/x-ndjson (one event per line)",
            415,
        )
    try:
        decoded: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _bad("invalid_json", f"the body is not JSON: {exc}") from None
    if type(decoded) is not list:
        raise _bad("not_an_array", f"the body must be a JSON array of events, got {type(decoded).__name__}")
    if len(decoded) > MAX_EVENTS:
        raise _too_many(len(decoded))
    return [orjson.dumps(item) for item in decoded]


def parse_events(body: bytes, content_type: str | None, decoder: Decoder) -> Parsed:
    """Every item of a ``POST /v1/events`` body, checked by the codec; 4xx for a body that is no list of items."""
    out = Parsed()
    for index, raw in enumerate(_items(body, media_type(content_type))):
        try:
            fields = decoder.fields(raw)
        except InvalidEvent as exc:
            out.rejected.append(_rejection(index, exc))
            continue
        out.records.append((index, fields[1].encode(), raw))
        out.fields[index] = fields
    return out


def _rejection(index: int, exc: InvalidEvent) -> Rejection:
    return {"index": index, "reason": exc.reason.value, "detail": exc.detail}


def judge(parsed: Parsed, definitions: Mapping[str, BoardDef | DefinitionError]) -> Parsed:
    """``parsed`` less the events their board's definition (``definitions``: every board of
    :meth:`Parsed.boards`) refuses, each rejected by index with the reason the worker's fold would dead-letter it
    with: no amount for the board's operator, a negative decr, an unreadable definition."""
    out = Parsed(rejected=list(parsed.rejected))
    for index, key, value in parsed.records:
        fields = parsed.fields[index]
        try:
            against(definitions[fields[0]], fields[2], fields[3], fields[4])
        except InvalidEvent as exc:
            out.rejected.append(_rejection(index, exc))
            continue
        out.records.append((index, key, value))
        out.fields[index] = fields
    out.rejected.sort(key=lambda r: r["index"])
    return out


def score_event(board: str, player: str, body: bytes, content_type: str | None, now_ms: int) -> bytes:
    """The one event of ``POST /v1/boards/{board}/players/{player}/scores``: the body's ``delta`` or
    ``op``/``score`` and ``meta`` with the path's board and player and the API's clock as ``ts`` (so the period
    of a board that resets is the one the API waits on). 422 when the codec refuses it."""
    if media_type(content_type) not in JSON_TYPES:
        raise _bad("unsupported_media_type", "send application/json", 415)
    try:
        given: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _bad("invalid_json", f"the body is not JSON: {exc}") from None
    if type(given) is not dict:
        raise _bad("not_an_object", 'the body must be a JSON object: {"delta": N} or {"op": "best", "score": N}')
    unknown = sorted(set(given) - SCORE_FIELDS)
    if unknown:
        raise ApiError(422, "invalid_event", f"unknown fields {unknown}: send delta, or op and score, and meta")
    value = orjson.dumps({**given, "board": board, "player": player, "ts": now_ms})
    try:
        Decoder().fields(value)
    except InvalidEvent as exc:
        raise ApiError(422, exc.reason.value, exc.detail) from None
    return value


def judge_score(value: bytes, definition: BoardDef | DefinitionError) -> None:
    """The event of :func:`score_event` against its board's ``definition``, as the worker's fold checks it: 422
    with the reason it would be dead-lettered for."""
    fields = Decoder().fields(value)  # valid: score_event checked it
    try:
        against(definition, fields[2], fields[3], fields[4])
    except InvalidEvent as exc:
        raise ApiError(422, exc.reason.value, exc.detail) from None


#: The OpenAPI requestBody of each write (the event contract itself: docs/events.md).
_EVENT = {
    "type": "object",
    "description": "A score event of the contract: board (default global), player, op, delta or score, ts, meta",
    "required": ["player"],
}
EVENTS_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"type": "array", "maxItems": MAX_EVENTS, "items": _EVENT}},
        "application/x-ndjson": {"schema": {"type": "string", "description": "One event per line"}},
    },
}
SCORE_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": '{"delta": 10} (the board\'s operator, incr or decr), or {"op": "best", "score": 99}; '
                "meta optional",
                "properties": {
                    "delta": {"type": "integer"},
                    "op": {"type": "string", "enum": ["incr", "decr", "set", "best"]},
                    "score": {"type": "integer"},
                    "meta": {"type": "object"},
                },
                "additionalProperties": False,
            }
        }
    },
}
