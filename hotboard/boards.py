"""Board definitions: how a board orders, combines and ranks scores. Pure, no I/O.

A definition is stored in ``hb:{B}:def`` (a hash beside the board, same hash tag: fields ``order``,
``operator``, ``ties``, ``spec`` and ``created``), so every worker and every API process reads the same one.
An undeclared board has :data:`DEFAULT`. A board's definition can change only while nothing was ever applied
to it (the flush scripts check ``spec`` against the one the worker folded with, so a definition created while
workers run is honoured before the board's first event is applied).

How each definition is laid out in Redis (docs/redis-layout.md says the same):

- ``hb:{B}`` holds the exact totals. Members are player ids; for ``earliest`` boards they are the 16-digit,
  zero-padded tie time (ms) followed by the player id, so equal scores sort by time, then id, and
  ``hb:{B}:members`` maps each player to its member. ``earliest`` boards on ``desc`` store ``-score`` and
  every board is then read in ascending order (ZRANGE), so earlier beats later in both orders.
- ``dense`` boards keep the distinct scores in ``hb:{B}:dense`` (member = the score printed as an integer,
  score = the stored score) with a count per score in ``hb:{B}:counts``: a dense rank is one ZCOUNT.
- ``hb:{B}:pmeta`` maps a player to its display metadata (a JSON object, at most 512 bytes encoded).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, get_args

from hotboard.periods import NEVER, Schedule, parse_reset

Order = Literal["desc", "asc"]
Operator = Literal["incr", "decr", "set", "best"]
Ties = Literal["shared", "dense", "earliest", "lexical"]
ORDERS: tuple[Order, ...] = get_args(Order)
OPERATORS: tuple[Operator, ...] = get_args(Operator)
TIES: tuple[Ties, ...] = get_args(Ties)

#: Width of the tie time at the start of an ``earliest`` member: every ms time up to 2^53 - 1 has 16 digits.
TIE_DIGITS = 16
#: Defaults of a seasonal board: closed periods kept queryable, and how long late events still count.
DEFAULT_KEEP = 4
DEFAULT_GRACE_MS = 60_000
MAX_KEEP = 1000
_DIGITS = re.compile(r"[0-9]{1,19}")


@lru_cache(maxsize=1024)
def schedule_of(reset: str) -> Schedule:
    """Parsed once per distinct ``reset`` (a cron expression costs a parse)."""
    return parse_reset(reset)


class DefinitionError(ValueError):
    """A definition that cannot be (or can no longer be) what was asked; the message says why."""


@dataclass(frozen=True, slots=True)
class BoardDef:
    order: Order = "desc"
    operator: Operator = "incr"
    ties: Ties = "shared"
    #: never, hourly, daily, weekly, monthly or a 5-field cron expression (UTC): see hotboard.periods.
    reset: str = NEVER
    keep: int = DEFAULT_KEEP
    grace_ms: int = DEFAULT_GRACE_MS
    #: Derived once here, read per event by the folds (attributes, not properties: no call per read).
    seasonal: bool = field(init=False, repr=False, compare=False)
    #: Events of the board's own operator fold by ``+=`` and flush by ZINCRBY (the fast path).
    summable: bool = field(init=False, repr=False, compare=False)
    earliest: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("order", self.order, ORDERS),
            ("operator", self.operator, OPERATORS),
            ("ties", self.ties, TIES),
        ):
            if value not in allowed:
                raise DefinitionError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        try:
            schedule = schedule_of(self.reset)
        except ValueError as exc:
            raise DefinitionError(str(exc)) from None
        if schedule.reset != self.reset:
            object.__setattr__(self, "reset", schedule.reset)  # canonical: one spelling, one spec
        if type(self.keep) is not int or not 0 <= self.keep <= MAX_KEEP:
            raise DefinitionError(f"keep must be an integer between 0 and {MAX_KEEP}, got {self.keep!r}")
        if type(self.grace_ms) is not int or self.grace_ms < 0:
            raise DefinitionError(f"grace_ms must be a non-negative integer, got {self.grace_ms!r}")
        seasonal = self.reset != NEVER
        object.__setattr__(self, "seasonal", seasonal)
        object.__setattr__(
            self, "summable", self.operator == "incr" and self.ties in ("shared", "lexical") and not seasonal
        )
        object.__setattr__(self, "earliest", self.ties == "earliest")

    @property
    def spec(self) -> str:
        """The canonical one-string form, compared by the flush scripts: ``desc/incr/shared``, and for a
        seasonal board ``desc/incr/shared|weekly|4|60000`` (``|``: a cron expression has spaces and slashes)."""
        base = f"{self.order}/{self.operator}/{self.ties}"
        return base if not self.seasonal else f"{base}|{self.reset}|{self.keep}|{self.grace_ms}"

    @property
    def schedule(self) -> Schedule:
        return schedule_of(self.reset)

    @property
    def sign(self) -> int:
        """Stored score = sign x score (see the module docstring)."""
        return -1 if self.earliest and self.order == "desc" else 1

    @property
    def reverse(self) -> bool:
        """Read highest-stored-first (ZREVRANGE)?"""
        return self.order == "desc" and not self.earliest

    def as_dict(self) -> dict[str, str | int]:
        return {
            "order": self.order,
            "operator": self.operator,
            "ties": self.ties,
            "reset": self.reset,
            "keep": self.keep,
            "grace_ms": self.grace_ms,
        }


DEFAULT = BoardDef()


def from_spec(spec: str) -> BoardDef:
    """A stored ``spec`` -> its definition. Raises DefinitionError, and only that, for a spec hotboard did not
    write (a worker dead-letters the board's events as ``bad_definition``, a reader answers 503 for that
    board): a cron parser meeting text it was never meant to see may raise anything."""
    try:
        return _parse_spec(spec)
    except DefinitionError:
        raise
    except (ValueError, ArithmeticError, LookupError, TypeError) as exc:
        raise DefinitionError(f"stored spec {spec[:60]!r} cannot be read: {exc}") from None


def _parse_spec(spec: str) -> BoardDef:
    base, *season = spec.split("|")
    parts = base.split("/")
    if len(parts) != 3 or len(season) not in (0, 3):
        raise DefinitionError(f"a definition spec is order/operator/ties[|reset|keep|grace_ms], got {spec[:60]!r}")
    if not season:
        return BoardDef(*parts)  # type: ignore[arg-type]  # validated in __post_init__
    reset, keep, grace = season
    if _DIGITS.fullmatch(keep) is None or _DIGITS.fullmatch(grace) is None:  # not str.isdigit: '²' is a digit
        raise DefinitionError(f"keep and grace_ms in a spec are integers, got {spec[:60]!r}")
    return BoardDef(*parts, reset, int(keep), int(grace))  # type: ignore[arg-type, call-arg]


def from_hash(fields: Mapping[bytes, bytes] | Mapping[str, str]) -> BoardDef:
    """``HGETALL hb:{B}:def`` -> the definition (an empty hash: the default). Raises DefinitionError, and only
    that, when the stored hash is not one hotboard wrote (a worker dead-letters the board's events as
    ``bad_definition``, a reader answers 503 for that board): whatever a foreign writer stored."""
    if not fields:
        return DEFAULT
    try:
        text = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()
        }
    except UnicodeDecodeError as exc:
        raise DefinitionError(f"stored definition is not UTF-8 ({exc.object[:40]!r})") from None
    spec = text.get("spec")
    if spec is None:
        raise DefinitionError("stored definition has no spec field")
    return from_spec(spec)


def to_hash(definition: BoardDef, created_ms: int) -> dict[str, str]:
    fields = {k: str(v) for k, v in definition.as_dict().items()}
    return {**fields, "spec": definition.spec, "created": str(created_ms)}
