"""Calling :data:`hotboard.lua_groups.FLUSH_GROUP`: one group's window packed into its KEYS and ARGV, and its
reply read back. Not wired into the worker yet (docs/group-bookkeeping.md, step 1); the bench and the script's
tests call it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from itertools import chain
from typing import Any, NamedTuple

from hotboard import keys
from hotboard.boards import DEFAULT
from hotboard.lua_groups import FLUSH_GROUP
from hotboard.redis_client import Client
from hotboard.script import Script

SCRIPT = Script(FLUSH_GROUP)


class DefRead(IntEnum):
    """What the worker read of a board's definition hash, which the script checks is still so."""

    #: No definition hash: the board's first group write stores the (marked) default or the period's seed.
    ABSENT = 0
    #: A marked default or a seeded period copy: only its existence is checked.
    MARKED = 1
    #: Declared (marked or not yet): its spec is compared with the folded one.
    DECLARED = 2


class GroupBoard(NamedTuple):
    """One board's share of the window (a tuple: a window holds ~1,000 of them, built per flush)."""

    board: str
    #: player -> summed delta (FLUSH_GROUP takes ``incr`` windows only).
    deltas: Mapping[str, int]
    #: The spec the window was folded under (a period board's: the logical board's, seeded into its copy).
    spec: str = DEFAULT.spec
    definition: DefRead = DefRead.ABSENT
    #: A period board's expiry (ms since the epoch); 0: never.
    expire_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class GroupWindow:
    #: The group's tag (:func:`hotboard.keys.group_key`).
    group: str
    #: Watermark field of each partition the call carries -> (the group's expected watermark, its new one).
    marks: Mapping[str, tuple[int, int]]
    boards: Sequence[GroupBoard]
    #: The group's epoch as the worker read it ("0": absent).
    epoch: str = "0"
    layout: str = field(default_factory=keys.layout_stamp)


class GroupOutcome(StrEnum):
    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"
    FENCED = "fenced"
    #: Another writer stepped the group's epoch: read the group's boards again and refold.
    EPOCH_MOVED = "epoch_moved"
    #: The group was written under another layout stamp (mode or number of groups).
    OTHER_LAYOUT = "other_layout"
    #: A declared board's stored spec is not the folded one.
    REDEFINED = "redefined"
    #: An applied or definition hash is not as the worker read it: an older tool wrote under a board.
    FOREIGN_WRITE = "foreign_write"
    #: A board's meta hash holds a version that is no number: nothing was written (an operator's repair).
    BAD_META = "bad_meta"


@dataclass(frozen=True, slots=True)
class GroupResult:
    outcome: GroupOutcome
    #: APPLIED: each board's new version, in the window's order (the group's, one for the call; 0: skipped, past
    #: its expiry), and its totals held at +-MAX_EXACT.
    versions: tuple[int, ...] = ()
    saturated: tuple[int, ...] = ()
    #: FENCED: watermark field -> the group's (-1: absent).
    current: dict[str, int] | None = None
    #: EPOCH_MOVED, OTHER_LAYOUT, REDEFINED, BAD_META: the value Redis holds; FOREIGN_WRITE: the two EXISTS answers.
    held: str | None = None
    #: REDEFINED, BAD_META: the board.
    board: str | None = None


def command_parts(window: GroupWindow) -> tuple[list[str], list[Any]]:
    """The call's KEYS and ARGV (see :data:`hotboard.lua_groups.FLUSH_GROUP`)."""
    kinds: dict[tuple[str, int], int] = {}
    keys_: list[str] = [keys.group_key(window.group)]
    boards: list[Any] = []
    flush_keys = keys.flush_keys
    for b in window.boards:
        kind = kinds.setdefault((b.spec, b.expire_at_ms), len(kinds) + 1)
        keys_ += flush_keys(b.board)
        boards += (3 * kind + b.definition, 2 * len(b.deltas))
        boards.extend(chain.from_iterable(b.deltas.items()))
    args: list[Any] = [window.layout, window.epoch, len(window.marks)]
    for name, (expected, new) in window.marks.items():
        args += (name, expected, new)
    args.append(len(kinds))
    args.extend(chain.from_iterable(kinds))
    args += boards
    return keys_, args


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def parse(window: GroupWindow, reply: Sequence[Any]) -> GroupResult:
    code = int(reply[0])
    if code == 0:
        version, per_board = int(reply[1]), reply[2:]
        versions = tuple(0 if s < 0 else version for s in per_board)
        return GroupResult(GroupOutcome.APPLIED, versions, tuple(max(0, s) for s in per_board))
    if code == 1:
        return GroupResult(GroupOutcome.ALREADY_APPLIED)
    if code == -1:
        return GroupResult(GroupOutcome.FENCED, current=dict(zip(window.marks, map(int, reply[1:]), strict=True)))
    if code == -4:
        return GroupResult(GroupOutcome.REDEFINED, held=_text(reply[2]), board=window.boards[int(reply[1]) - 1].board)
    if code == -6:
        return GroupResult(GroupOutcome.BAD_META, held=_text(reply[2]), board=window.boards[int(reply[1]) - 1].board)
    if code == -5:
        return GroupResult(GroupOutcome.FOREIGN_WRITE, held=f"{int(reply[1])} {int(reply[2])}")
    outcome = {-2: GroupOutcome.EPOCH_MOVED, -3: GroupOutcome.OTHER_LAYOUT}[code]
    return GroupResult(outcome, held=_text(reply[1]))


async def flush_group(redis: Client, window: GroupWindow) -> GroupResult:
    """Apply one group's window in one script call."""
    keys_, args = command_parts(window)
    return parse(window, await SCRIPT(redis, keys_, args))
