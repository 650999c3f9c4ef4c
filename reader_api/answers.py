"""The answers, one type per response body. Handlers build them as plain dicts (what orjson encodes fastest)
and the OpenAPI document describes them from these same declarations (:func:`reader_api.openapi.schemas`),
so a body and its schema cannot drift apart. ``Annotated[..., Schema(...)]`` adds JSON-schema keywords."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, NotRequired, TypedDict

from hotboard.keys import MAX_EXACT


@dataclass(frozen=True)
class Schema:
    """JSON-schema keywords for one field, e.g. ``Schema(minimum=0, description="...")``."""

    keywords: dict[str, Any]

    def __init__(self, **keywords: Any) -> None:
        object.__setattr__(self, "keywords", keywords)


#: Scores are exact integers stored as doubles, exact within ±(2^53 - 1). Beyond that (a total ≥ 2^53, up to
#: ±inf) a score is no longer exact and answers saturated at these bounds, so every stored score has one
#: JSON integer answer that any client (a JavaScript number too) holds exactly.
MAX_SCORE = MAX_EXACT
Score = Annotated[
    int,
    Schema(
        minimum=-MAX_SCORE,
        maximum=MAX_SCORE,
        description="Exact integer total; a stored score beyond ±(2^53 - 1) answers saturated at that bound",
    ),
]
Rank = Annotated[
    int,
    Schema(
        minimum=1,
        description="1-based, best first by the board's order (highest first on "
        "desc boards, lowest first on asc). Equal scores by the board's ties: shared 1, 2, 2, 4 (the "
        "default); dense 1, 2, 2, 3; earliest: distinct, who reached the score first ranks higher; lexical: "
        "distinct, in Redis's order of the ids",
    ),
]
Total = Annotated[int, Schema(minimum=0, description="Players on the board")]
Meta = Annotated[
    dict[str, Any] | None,
    Schema(
        description="The player's display metadata (a JSON object of at most "
        "512 bytes, last write wins); null when never set"
    ),
]
Version = Annotated[int | None, Schema(minimum=0, description="Bumped once per window applied; null if never flushed")]
AsOf = Annotated[
    int | None,
    Schema(description="Milliseconds since the epoch of the last window applied to the board; null if never flushed"),
]
#: Present only on the answers of a board that resets (seasons): the period answered.
PeriodId = Annotated[
    str,
    Schema(
        description="The period answered (boards that reset only), e.g. 2026-W49; see GET /v1/boards/{board}/periods"
    ),
]


class Entry(TypedDict):
    rank: Rank
    player: str
    score: Score
    meta: Meta


class TopPage(TypedDict):
    board: str
    total: Total
    entries: list[Entry]
    as_of: AsOf
    period: NotRequired[PeriodId]


class PlayerRank(TypedDict):
    board: str
    player: str
    rank: Rank
    score: Score
    meta: Meta
    total: Total
    as_of: AsOf
    period: NotRequired[PeriodId]


class Neighbourhood(TypedDict):
    board: str
    player: str
    total: Total
    entries: Annotated[list[Entry], Schema(description="The player and up to `radius` neighbours each side, by rank")]
    as_of: AsOf
    period: NotRequired[PeriodId]


class FriendsList(TypedDict):
    board: str
    total: Total
    entries: Annotated[list[Entry], Schema(description="The players found, sorted by rank")]
    missing: Annotated[list[str], Schema(description="Ids asked for that are not on the board, in the order asked")]
    as_of: AsOf
    period: NotRequired[PeriodId]


Order = Annotated[str, Schema(enum=["desc", "asc"], description="desc: highest score first; asc: lowest first")]
Operator = Annotated[str, Schema(enum=["incr", "decr", "set", "best"], description="How events change a score")]
Ties = Annotated[str, Schema(enum=["shared", "dense", "earliest", "lexical"], description="How equal scores rank")]


class BoardSummary(TypedDict):
    board: str
    order: Order
    operator: Operator
    ties: Ties
    reset: Annotated[str, Schema(description="never, hourly, daily, weekly, monthly or a cron expression (UTC)")]
    keep: Annotated[int, Schema(minimum=0, description="Closed periods kept queryable")]
    grace_ms: Annotated[int, Schema(minimum=0, description="How long after a period closes its late events count")]


class BoardList(TypedDict):
    boards: Annotated[list[BoardSummary], Schema(description="Boards by name (bytewise), after `after`")]
    next: Annotated[str | None, Schema(description="Pass as `after` for the next page; null on the last page")]


class BoardInfo(BoardSummary):
    """A board's definition (as listed), and its state."""

    declared: Annotated[bool, Schema(description="Declared (hotboard boards create); else the default definition")]
    size: Total
    as_of: AsOf
    version: Version
    period: NotRequired[PeriodId]


class PeriodSummary(TypedDict):
    id: Annotated[
        str,
        Schema(
            description="Period id: 2026-12-01T07 (hourly), 2026-12-01 (daily), 2026-W49 (ISO "
            "week), 2026-12 (monthly), 20261201T0700Z (cron: the period's start)"
        ),
    ]
    start_ms: Annotated[int, Schema(description="Start (inclusive), ms since the epoch, UTC")]
    end_ms: Annotated[int, Schema(description="End (exclusive), ms since the epoch, UTC")]
    size: Total
    as_of: AsOf


class PeriodList(TypedDict):
    board: str
    reset: Annotated[str, Schema(description="hourly, daily, weekly, monthly or a cron expression (UTC)")]
    keep: Annotated[int, Schema(minimum=0, description="Closed periods kept queryable")]
    grace_ms: Annotated[int, Schema(minimum=0, description="How long after a period closes its late events count")]
    periods: Annotated[
        list[PeriodSummary],
        Schema(
            description="The current and kept closed periods that exist "
            "(a period exists once its first window was applied), newest "
            "first"
        ),
    ]


class ErrorBody(TypedDict):
    error: Annotated[str, Schema(description="Machine-readable code, e.g. board_not_found, invalid_parameter")]
    message: str
    parameter: NotRequired[Annotated[str, Schema(description="The offending parameter (422 only)")]]
    outcome: NotRequired[
        Annotated[
            str,
            Schema(
                enum=["not_sent", "unknown"],
                description="A write's 503 only: not_sent (nothing was produced: retry), unknown (Kafka did not "
                "acknowledge in time: the events may or may not be in the topic)",
            ),
        ]
    ]


class Health(TypedDict):
    status: str


Token = Annotated[
    str,
    Schema(
        description="Consistency token: where the accepted events landed in the topic (opaque, URL-safe). Pass it "
        "as `after` to any board read to see the write"
    ),
]


class Rejection(TypedDict):
    index: Annotated[int, Schema(minimum=0, description="Position of the event in the body (NDJSON: non-blank line)")]
    reason: Annotated[
        str, Schema(description="The worker's codec reason, as on the dead-letter topic: bad_type, missing_field, ...")
    ]
    detail: str


class WriteAnswer(TypedDict):
    accepted: Annotated[int, Schema(minimum=0, description="Events acknowledged by Kafka")]
    rejected: Annotated[list[Rejection], Schema(description="Invalid events, not produced; the others are")]
    token: Token


class ScoreAccepted(TypedDict):
    token: Token
    wait: NotRequired[
        Annotated[
            str,
            Schema(
                enum=["timeout", "dead_lettered"],
                description="With ?wait=true: why there is no score yet (wait_ms passed, or the worker dead-lettered "
                "the event: the board's definition refuses it)",
            ),
        ]
    ]


class ScoreAfterWrite(PlayerRank):
    """The player from the first snapshot covering the write: right after its window, when ``exact`` says so."""

    version: Annotated[int | None, Schema(minimum=0, description="The board version this answer was read at")]
    exact: Annotated[
        bool,
        Schema(
            description="true: this is the state right after the window that applied the write (the API saw the "
            "version before it not covering the write); false: not known to be that state (two steps of the board "
            "landed between two polls): a state read after the write was covered, never older"
        ),
    ]
    token: Token
