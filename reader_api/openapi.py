"""The OpenAPI document, built once per app from the route table (:data:`reader_api.routes.ENDPOINTS`), the
answer types (:mod:`reader_api.answers`) and the parameter rules (:mod:`reader_api.params`).

The endpoints are plain Starlette routes (FastAPI's per-request dependency solving cost ~6x the whole of
Starlette's routing on the benchmark machine), so the document is assembled here rather than introspected.
The schemathesis test holds the implementation to it.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, NotRequired, Union, get_args, get_origin, get_type_hints, is_typeddict

from hotboard.keys import BOARD_RE, PLAYER_MAX_CHARS
from reader_api import tokens
from reader_api.answers import ErrorBody, Schema
from reader_api.endpoint import Endpoint
from reader_api.params import INT_PARAMS, MAX_IDS, MAX_PERIOD_CHARS
from reader_api.routes import BOARDS, served

REF = "#/components/schemas/{model}"
JSON = "application/json"

_INT_DOCS = {
    "limit": "Entries per page",
    "offset": "Entries to skip; past the end gives an empty page",
    "radius": "Neighbours on each side of the player, clipped at the ends of the board",
}
_PATH_PARAMS: dict[str, dict[str, Any]] = {
    "board": {
        "name": "board",
        "in": "path",
        "required": True,
        "description": "Board name: 1-64 characters of A-Z a-z 0-9 _ . : - (percent-encoding accepted)",
        "schema": {"type": "string", "pattern": f"^{BOARD_RE.pattern}$"},
    },
    "player": {
        "name": "player",
        "in": "path",
        "required": True,
        "description": f"Player id: 1-{PLAYER_MAX_CHARS} characters, no control characters; percent-encode "
        "reserved ones (`/` as %2F)",
        "schema": {"type": "string", "pattern": f"^[^\\u0000-\\u001f\\u007f-\\u009f]{{1,{PLAYER_MAX_CHARS}}}$"},
    },
}


def _int_param(name: str) -> dict[str, Any]:
    default, low, high = INT_PARAMS[name]
    schema: dict[str, Any] = {"type": "integer", "minimum": low, "default": default}
    if high is not None:
        schema["maximum"] = high
    return {"name": name, "in": "query", "required": False, "description": _INT_DOCS[name], "schema": schema}


_AFTER = {
    "name": "after",
    "in": "query",
    "required": False,
    "description": "List the boards after this name (exclusive): the `next` of the previous page",
    "schema": {"type": "string", "pattern": f"^{BOARD_RE.pattern}$"},
}
_PERIOD = {
    "name": "period",
    "in": "query",
    "required": False,
    "description": "Boards that reset only: `current` (the default, from the API's clock), `previous`, or a period "
    "id (2026-12-01T07 hourly, 2026-12-01 daily, 2026-W49 weekly, 2026-12 monthly, 20261201T0700Z cron). A period "
    "not kept or not started is a 404 naming the kept ones; a malformed id, or anything but `current` on a board "
    "that never resets, a 422",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_PERIOD_CHARS},
}
_AFTER_TOKEN = {
    "name": "after",
    "in": "query",
    "required": False,
    "description": "Read your writes: a consistency token from a write; the answer waits (up to `wait_ms`) until the "
    "board covers it, else 503 with Retry-After",
    "schema": {"type": "string", "pattern": tokens.PATTERN},
}
_WAIT = {
    "name": "wait",
    "in": "query",
    "required": False,
    "description": "true: answer 200 with the player's score and rank from the first board snapshot holding the write "
    "(202 with the token past `wait_ms`)",
    "schema": {"type": "boolean", "default": False},
}


def _wait_ms(max_wait_ms: int) -> dict[str, Any]:
    return {
        "name": "wait_ms",
        "in": "query",
        "required": False,
        "description": "How long to wait (ms); default HOTBOARD_API_WAIT_MS (3000), at most HOTBOARD_API_MAX_WAIT_MS",
        "schema": {"type": "integer", "minimum": 0, "maximum": max_wait_ms},
    }


_ID = f"[^,\\u0000-\\u001f\\u007f-\\u009f]{{1,{PLAYER_MAX_CHARS}}}"
#: Worst-case bytes per character in a query (a 4-byte UTF-8 character, percent-encoded) and room for the rest
#: of the request line, so any ``ids`` value within ``maxLength`` fits the server's request-line limit.
_ENCODED_CHAR_BYTES, _LINE_OVERHEAD = 12, 512


def _ids(max_request_line_bytes: int) -> dict[str, Any]:
    """The validator's rule as a schema: 1 to MAX_IDS ids joined by commas, each a valid player id."""
    max_chars = (max_request_line_bytes - _LINE_OVERHEAD) // _ENCODED_CHAR_BYTES
    return {
        "name": "ids",
        "in": "query",
        "required": True,
        "description": f"Comma-separated player ids, at most {MAX_IDS} (duplicates count, and are answered once). "
        f"Any value up to {max_chars} characters fits the request-line limit; a longer one may get 414",
        "schema": {"type": "string", "pattern": f"^{_ID}(,{_ID}){{0,{MAX_IDS - 1}}}$", "maxLength": max_chars},
    }


_SCALARS: dict[Any, str] = {int: "integer", str: "string", bool: "boolean"}


def _query(name: str, max_request_line_bytes: int, path: str, max_wait_ms: int) -> dict[str, Any]:
    if name == "ids":
        return _ids(max_request_line_bytes)
    if name == "period":
        return _PERIOD
    if name == "after":
        return _AFTER if path == BOARDS else _AFTER_TOKEN
    if name == "wait_ms":
        return _wait_ms(max_wait_ms)
    return _WAIT if name == "wait" else _int_param(name)


def schemas(answers: list[type]) -> dict[str, dict[str, Any]]:
    """JSON schemas of answer types (TypedDicts of int, str, list, ``| None`` and ``Annotated[..., Schema]``),
    keyed by type name; a nested answer type becomes a ``$ref`` with a schema of its own."""
    found: dict[str, dict[str, Any]] = {}

    def of(tp: Any) -> dict[str, Any]:
        origin = get_origin(tp)
        if origin is NotRequired:  # said by the object's "required" (not __required_keys__: wrong on 3.11 under
            # ``from __future__ import annotations``)
            return of(get_args(tp)[0])
        if origin is Annotated:
            base, *extras = get_args(tp)
            schema = of(base)
            for extra in extras:
                if isinstance(extra, Schema):
                    schema.update(extra.keywords)
            return schema
        if origin in (Union, types.UnionType):
            return {"anyOf": [{"type": "null"} if arg is type(None) else of(arg) for arg in get_args(tp)]}
        if origin is list:
            return {"type": "array", "items": of(get_args(tp)[0])}
        if is_typeddict(tp):
            if tp.__name__ not in found:
                hints = get_type_hints(tp, include_extras=True)
                required = [name for name, hint in hints.items() if get_origin(hint) is not NotRequired]
                properties = {name: of(hint) for name, hint in hints.items()}
                found[tp.__name__] = {
                    "type": "object",
                    "title": tp.__name__,
                    "properties": properties,
                    "required": required,
                }
            return {"$ref": REF.format(model=tp.__name__)}
        if origin is dict:
            return {"type": "object"}
        if tp in _SCALARS:
            return {"type": _SCALARS[tp]}
        raise TypeError(f"no JSON schema for {tp!r}")

    for answer in answers:
        of(answer)
    return found


def _json(answer: type, description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": {"$ref": REF.format(model=answer.__name__)}}},
    }
    if headers:
        response["headers"] = headers
    return response


def _events(answer: type, description: str, media: str) -> dict[str, Any]:
    """A stream of events whose ``data`` each holds one ``answer`` (the schema says what one event carries)."""
    ref = REF.format(model=answer.__name__)
    schema = {"type": "string", "description": f"Server-Sent Events; each event's data is a {answer.__name__}"}
    return {"description": description, "content": {media: {"schema": schema, "x-event-data": {"$ref": ref}}}}


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "string"}}}


def _operation(endpoint: Endpoint, max_request_line_bytes: int, max_wait_ms: int) -> dict[str, Any]:
    doc = endpoint.doc
    assert doc is not None
    query = [_query(name, max_request_line_bytes, endpoint.path, max_wait_ms) for name in endpoint.query]
    errors = {
        str(status): _json(ErrorBody, means, _RETRY_AFTER if status == 503 else None) for status, means in doc.errors
    }
    operation: dict[str, Any] = {"operationId": doc.operation, "summary": doc.summary, "tags": [doc.tag]}
    parameters = [*(_PATH_PARAMS[name] for name in endpoint.params), *query]
    if parameters:
        operation["parameters"] = parameters
    if doc.request is not None:
        operation["requestBody"] = doc.request
    if endpoint.write:
        operation["security"] = [{"bearer": []}]
        operation.setdefault("parameters", []).append(_IDEMPOTENCY)
    also = {str(status): _json(answer, means) for status, answer, means in doc.also}
    ok = _json(doc.answer, doc.answered) if doc.media == JSON else _events(doc.answer, doc.answered, doc.media)
    operation["responses"] = {"200": ok, **also, **errors}
    return {endpoint.method.lower(): operation}


_IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A retry with the same key answers as the first request did and produces nothing more (kept 24 h)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


def document(
    title: str,
    version: str,
    description: str,
    max_request_line_bytes: int,
    writes: bool = False,
    max_wait_ms: int = 30_000,
) -> dict[str, Any]:
    documented = [e for e in served(writes) if e.doc is not None]
    answers: list[type] = [ErrorBody]
    for e in documented:
        assert e.doc is not None
        answers += [e.doc.answer, *(answer for _, answer, _ in e.doc.also)]
    paths: dict[str, dict[str, Any]] = {}
    for e in documented:
        paths.setdefault(e.path, {}).update(_operation(e, max_request_line_bytes, max_wait_ms))
    components: dict[str, Any] = {"schemas": schemas(answers)}
    if writes:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": components,
    }
