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
from reader_api.answers import ErrorBody, Schema
from reader_api.params import INT_PARAMS, MAX_IDS, MAX_PERIOD_CHARS
from reader_api.routes import ENDPOINTS, Endpoint

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


def _query(name: str, max_request_line_bytes: int) -> dict[str, Any]:
    if name == "ids":
        return _ids(max_request_line_bytes)
    if name == "period":
        return _PERIOD
    return _AFTER if name == "after" else _int_param(name)


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


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "string"}}}


def _operation(endpoint: Endpoint, max_request_line_bytes: int) -> dict[str, Any]:
    doc = endpoint.doc
    assert doc is not None
    query = [_query(name, max_request_line_bytes) for name in endpoint.query]
    errors = {
        str(status): _json(ErrorBody, means, _RETRY_AFTER if status == 503 else None) for status, means in doc.errors
    }
    operation: dict[str, Any] = {"operationId": doc.operation, "summary": doc.summary, "tags": [doc.tag]}
    parameters = [*(_PATH_PARAMS[name] for name in endpoint.params), *query]
    if parameters:
        operation["parameters"] = parameters
    operation["responses"] = {"200": _json(doc.answer, doc.answered), **errors}
    return {"get": operation}


def document(title: str, version: str, description: str, max_request_line_bytes: int) -> dict[str, Any]:
    documented = [e for e in ENDPOINTS if e.doc is not None]
    answers = [ErrorBody, *(e.doc.answer for e in documented if e.doc is not None)]
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": {e.path: _operation(e, max_request_line_bytes) for e in documented},
        "components": {"schemas": schemas(answers)},
    }
