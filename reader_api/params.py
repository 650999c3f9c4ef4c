"""Request parameters checked with the event contract's rules (:mod:`hotboard.keys`), so every board and
player the writer can store is addressable here, and nothing else reaches Redis."""

from __future__ import annotations

import re
from collections.abc import Mapping

from hotboard.keys import is_valid_board, is_valid_player
from reader_api.errors import invalid

MAX_IDS = 200
MAX_PERIOD_CHARS = 32
#: name -> (default, minimum, maximum or None); the OpenAPI document is built from this table too.
INT_PARAMS: dict[str, tuple[int, int, int | None]] = {
    "limit": (100, 1, 1000),
    "offset": (0, 0, None),
    "radius": (5, 0, 100),
}
_INT_RE = re.compile(r"[+-]?[0-9]{1,40}")
#: Stand-in for a percent-encoded ``/`` inside one path segment (see :mod:`reader_api.paths`). A control
#: character, so it can never be part of a valid id itself.
ENCODED_SLASH = "\x1f"


def check_board(board: str, parameter: str = "board") -> str:
    if not is_valid_board(board):
        raise invalid(parameter, "must be 1-64 characters of A-Z a-z 0-9 _ . : -")
    return board


def after_param(query: Mapping[str, str]) -> str | None:
    """The board name a listing continues after (exclusive), or None for the first page."""
    raw = query.get("after")
    return None if raw is None else check_board(raw, "after")


def check_player(player: str, parameter: str = "player") -> str:
    player = player.replace(ENCODED_SLASH, "/")
    if not is_valid_player(player):
        raise invalid(parameter, "must be 1-128 characters without control characters")
    return player


def parse_ids(ids: str) -> list[str]:
    """Comma-separated player ids, 1 to ``MAX_IDS`` of them, duplicates dropped (first occurrence kept).
    Duplicates count towards the limit, so the rule is a plain pattern (the OpenAPI schema states it).

    Ids are taken verbatim (a space is a legal id character); an id containing a comma cannot be asked for
    in a list and needs the single-player endpoint.
    """
    given = ids.split(",")
    if len(given) > MAX_IDS:
        raise invalid("ids", f"at most {MAX_IDS} player ids, got {len(given)}")
    wanted = list(dict.fromkeys(given))
    for player in wanted:
        if not is_valid_player(player):
            raise invalid("ids", f"{player!r} is not a valid player id (1-128 characters, no control characters)")
    return wanted


def int_param(query: Mapping[str, str], name: str) -> int:
    """A query integer within its bounds. Stricter than ``int()``, which would take ``1_0`` or `` 10``."""
    default, low, high = INT_PARAMS[name]
    raw = query.get(name)
    if raw is None:
        return default
    bounds = f">= {low}" if high is None else f"between {low} and {high}"
    if _INT_RE.fullmatch(raw) is None:
        raise invalid(name, f"must be an integer {bounds}, got {raw[:40]!r}")
    value = int(raw)
    if value < low or (high is not None and value > high):
        raise invalid(name, f"must be an integer {bounds}, got {value}")
    return value


def period_param(query: Mapping[str, str]) -> str | None:
    """``current``, ``previous`` or a period id (checked against the board's schedule later); None: absent."""
    raw = query.get("period")
    if raw is not None and not 0 < len(raw) <= MAX_PERIOD_CHARS:
        raise invalid("period", f"must be current, previous or a period id of at most {MAX_PERIOD_CHARS} characters")
    return raw


def ids_param(query: Mapping[str, str]) -> list[str]:
    raw = query.get("ids")
    if raw is None:
        raise invalid("ids", "is required: comma-separated player ids")
    return parse_ids(raw)
