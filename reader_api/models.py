"""Response models. They document the contract in the OpenAPI schema; handlers render with orjson directly
(no per-request model validation on the hot path), and the tests check the bodies against these shapes."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from reader_api.snapshot import MAX_SCORE

Score = Annotated[
    int,
    Field(ge=-MAX_SCORE, le=MAX_SCORE, description="Exact integer total; a stored score beyond ±(2^53 - 1) "
          "answers saturated at that bound"),
]  # fmt: skip
AS_OF = "Milliseconds since the epoch of the last window applied to the board; null if never flushed"


class Entry(BaseModel):
    rank: int = Field(ge=1, description="1-based; highest score first, equal scores reverse-lexicographic by id")
    player: str
    score: Score


class TopPage(BaseModel):
    board: str
    total: int = Field(ge=0, description="Players on the board")
    entries: list[Entry]
    as_of: int | None = Field(description=AS_OF)


class PlayerRank(BaseModel):
    board: str
    player: str
    rank: int = Field(ge=1)
    score: Score
    total: int = Field(ge=0)
    as_of: int | None = Field(description=AS_OF)


class Neighbourhood(BaseModel):
    board: str
    player: str
    total: int = Field(ge=0)
    entries: list[Entry] = Field(description="The player and up to `radius` neighbours each side, by rank")
    as_of: int | None = Field(description=AS_OF)


class FriendsList(BaseModel):
    board: str
    total: int = Field(ge=0)
    entries: list[Entry] = Field(description="The players found, sorted by rank")
    missing: list[str] = Field(description="Ids asked for that are not on the board, in the order asked")
    as_of: int | None = Field(description=AS_OF)


class ErrorBody(BaseModel):
    error: str = Field(description="Machine-readable code, e.g. board_not_found, invalid_parameter")
    message: str
    parameter: str | None = Field(None, description="The offending parameter (422 only)")


class Health(BaseModel):
    status: str
