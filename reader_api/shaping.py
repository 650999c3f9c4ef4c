"""Snapshots -> response bodies. Pure functions, so the shapes are tested without servers.

Ranks are 1-based positions, highest score first. Equal scores keep the order Redis gives them with
ZREVRANGE/ZREVRANK: reverse lexicographic (byte-wise) by player id, so every rank is distinct and paging
is stable while the board does not change.
"""

from __future__ import annotations

from typing import Any

from reader_api.errors import not_found
from reader_api.snapshot import Around, Entry, Friends, Header, Page, PlayerView


def entry(e: Entry) -> dict[str, Any]:
    return {"rank": e.rank, "player": e.player, "score": e.score}


def _known(board: str, header: Header) -> None:
    if not header.exists:
        raise not_found("board", f"board {board!r} does not exist")


def top(board: str, page: Page) -> dict[str, Any]:
    _known(board, page.header)
    return {
        "board": board,
        "total": page.header.total,
        "entries": [entry(e) for e in page.entries],
        "as_of": page.header.as_of,
    }


def player(board: str, name: str, view: PlayerView) -> dict[str, Any]:
    _known(board, view.header)
    if view.entry is None:
        raise not_found("player", f"player {name!r} is not on board {board!r}")
    return {
        "board": board,
        "player": name,
        "rank": view.entry.rank,
        "score": view.entry.score,
        "total": view.header.total,
        "as_of": view.header.as_of,
    }


def around(board: str, name: str, view: Around) -> dict[str, Any]:
    _known(board, view.header)
    if view.entries is None:
        raise not_found("player", f"player {name!r} is not on board {board!r}")
    return {
        "board": board,
        "player": name,
        "total": view.header.total,
        "entries": [entry(e) for e in view.entries],
        "as_of": view.header.as_of,
    }


def players(board: str, friends: Friends) -> dict[str, Any]:
    _known(board, friends.header)
    return {
        "board": board,
        "total": friends.header.total,
        "entries": [entry(e) for e in friends.entries],
        "missing": friends.missing,
        "as_of": friends.header.as_of,
    }
