"""The OpenAPI document, built once per app from the response models and the parameter table.

The endpoints are plain Starlette routes (FastAPI's per-request dependency solving cost ~6x the whole of
Starlette's routing on the benchmark machine), so the document is assembled here rather than introspected.
The schemathesis test holds the implementation to it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from hotboard.keys import BOARD_RE, PLAYER_MAX_CHARS
from reader_api import models
from reader_api.params import INT_PARAMS, MAX_IDS

REF = "#/components/schemas/{model}"
JSON = "application/json"

_INT_DOCS = {
    "limit": "Entries per page",
    "offset": "Entries to skip; past the end gives an empty page",
    "radius": "Neighbours on each side of the player, clipped at the ends of the board",
}
_PATH_PARAMS: dict[str, dict[str, Any]] = {
    "board": {
        "name": "board", "in": "path", "required": True,
        "description": "Board name: 1-64 characters of A-Z a-z 0-9 _ . : - (percent-encoding accepted)",
        "schema": {"type": "string", "pattern": f"^{BOARD_RE.pattern}$"},
    },
    "player": {
        "name": "player", "in": "path", "required": True,
        "description": f"Player id: 1-{PLAYER_MAX_CHARS} characters, no control characters; percent-encode "
        "reserved ones (`/` as %2F)",
        "schema": {"type": "string", "pattern": f"^[^\\u0000-\\u001f\\u007f-\\u009f]{{1,{PLAYER_MAX_CHARS}}}$"},
    },
}  # fmt: skip


def _int_param(name: str) -> dict[str, Any]:
    default, low, high = INT_PARAMS[name]
    schema: dict[str, Any] = {"type": "integer", "minimum": low, "default": default}
    if high is not None:
        schema["maximum"] = high
    return {"name": name, "in": "query", "required": False, "description": _INT_DOCS[name], "schema": schema}


_ID = f"[^,\\u0000-\\u001f\\u007f-\\u009f]{{1,{PLAYER_MAX_CHARS}}}"
#: Worst-case bytes per character in a query (a 4-byte UTF-8 character, percent-encoded) and room for the rest
#: of the request line, so any ``ids`` value within ``maxLength`` fits the server's request-line limit.
_ENCODED_CHAR_BYTES, _LINE_OVERHEAD = 12, 512


def _ids(max_request_line_bytes: int) -> dict[str, Any]:
    """The validator's rule as a schema: 1 to MAX_IDS ids joined by commas, each a valid player id."""
    max_chars = (max_request_line_bytes - _LINE_OVERHEAD) // _ENCODED_CHAR_BYTES
    return {
        "name": "ids", "in": "query", "required": True,
        "description": f"Comma-separated player ids, at most {MAX_IDS} (duplicates count, and are answered once). "
        f"Any value up to {max_chars} characters fits the request-line limit; a longer one may get 414",
        "schema": {"type": "string", "pattern": f"^{_ID}(,{_ID}){{0,{MAX_IDS - 1}}}$", "maxLength": max_chars},
    }  # fmt: skip


def _json(model: type[BaseModel], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": {"$ref": REF.format(model=model.__name__)}}},
    }
    if headers:
        response["headers"] = headers
    return response


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "string"}}}
_ERRORS = {
    "404": _json(models.ErrorBody, "Unknown board or player"),
    "422": _json(models.ErrorBody, "Invalid parameter, named in `parameter`"),
    "503": _json(
        models.ErrorBody,
        "Redis unreachable, or the board's stored meta is corrupt (the message names "
        "the key); retry after Retry-After seconds",
        _RETRY_AFTER,
    ),
}


def _operation(op_id: str, summary: str, params: list[dict[str, Any]], model: type[BaseModel]) -> dict[str, Any]:
    return {
        "get": {
            "operationId": op_id,
            "summary": summary,
            "tags": ["leaderboard"],
            "parameters": params,
            "responses": {"200": _json(model, "Answer from one consistent snapshot"), **_ERRORS},
        }
    }


def document(title: str, version: str, description: str, max_request_line_bytes: int) -> dict[str, Any]:
    all_models = (models.TopPage, models.PlayerRank, models.Neighbourhood, models.FriendsList, models.ErrorBody,
                  models.Health)  # fmt: skip
    _, defs = models_json_schema([(m, "serialization") for m in all_models], ref_template=REF)
    board, player = _PATH_PARAMS["board"], _PATH_PARAMS["player"]
    probe = {"tags": ["operations"]}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": {
            "/v1/boards/{board}/top": _operation(
                "top", "Top of the board, paged", [board, _int_param("limit"), _int_param("offset")], models.TopPage
            ),
            "/v1/boards/{board}/players/{player}": _operation(
                "player", "One player's rank and score", [board, player], models.PlayerRank
            ),
            "/v1/boards/{board}/players/{player}/around": _operation(
                "around",
                "A player and the neighbours above and below",
                [board, player, _int_param("radius")],
                models.Neighbourhood,
            ),
            "/v1/boards/{board}/players": _operation(
                "players",
                "Several players (a friends list), sorted by rank",
                [board, _ids(max_request_line_bytes)],
                models.FriendsList,
            ),
            "/healthz": {
                "get": {
                    **probe,
                    "operationId": "healthz",
                    "summary": "The process is alive",
                    "responses": {"200": _json(models.Health, "Alive")},
                }
            },
            "/readyz": {
                "get": {
                    **probe,
                    "operationId": "readyz",
                    "summary": "Redis answers",
                    "responses": {
                        "200": _json(models.Health, "Ready"),
                        "503": _json(models.ErrorBody, "Redis unreachable", _RETRY_AFTER),
                    },
                }
            },
        },
        "components": {"schemas": defs.get("$defs", {})},
    }
