"""The fast path's parsing: it must recognise only what it answers exactly like the full app."""

from __future__ import annotations

import pytest

from reader_api.fastpath import QUERY_KEYS, match, simple_query
from reader_api.routes import AROUND, PLAYER, TOP


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/boards/global/top", (TOP, {"board": "global"})),
        ("/v1/boards/global/players/p-1", (PLAYER, {"board": "global", "player": "p-1"})),
        ("/v1/boards/s:1.x/players/p-1/around", (AROUND, {"board": "s:1.x", "player": "p-1"})),
        ("/v1/boards//top", None),  # an empty parameter matches no route of the full app either: its 404
        ("/v1/boards/global/players", None),  # friends list: the full app
        ("/v1/boards/global/players/p-1/around/x", None),
        ("/v1/boards/global/bottom", None),
        ("/v2/boards/global/top", None),
        ("/healthz", None),
        ("/", None),
    ],
)
def test_match(path: str, expected: tuple[str, dict[str, str]] | None) -> None:
    assert match(path) == expected


@pytest.mark.parametrize(
    ("raw", "route", "expected"),
    [
        (b"", TOP, {}),
        (b"limit=10&offset=20", TOP, {"limit": "10", "offset": "20"}),
        (b"radius=3", AROUND, {"radius": "3"}),
        (b"limit=10&limit=20", TOP, None),  # repeated: the general parser decides
        (b"limit=%31", TOP, None),  # escaped
        (b"limit=+1", TOP, None),
        (b"limit", TOP, None),  # no '='
        (b"radius=3", TOP, None),  # not a parameter of this route
        (b"x=1", PLAYER, None),
        (b"limit=1;offset=2", TOP, None),
    ],
)
def test_simple_query(raw: bytes, route: str, expected: dict[str, str] | None) -> None:
    assert simple_query(raw, QUERY_KEYS[route]) == expected
