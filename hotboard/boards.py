"""Board definitions: how a board orders, combines and ranks scores. Pure, no I/O.

A definition is stored in ``hb:{B}:def`` (a hash beside the board, same hash tag: fields ``order``,
``operator``, ``ties``, ``spec`` and ``created``), so every worker and every API process reads the same one.
An undeclared board has :data:`DEFAULT`. A board's definition can change only while nothing was ever applied
to it (the flush scripts check ``spec`` against the one the worker folded with, so a definition created while
workers run is honoured before the board's first event is applied).

How each definition is laid out in Redis (the README's Redis layout table says the same):

- ``hb:{B}`` holds the exact totals. Members are player ids; for ``earliest`` boards they are the 16-digit,
  zero-padded tie time (ms) followed by the player id, so equal scores sort by time, then id, and
  ``hb:{B}:members`` maps each player to its member. ``earliest`` boards on ``desc`` store ``-score`` and
  every board is then read in ascending order (ZRANGE), so earlier beats later in both orders.
- ``dense`` boards keep the distinct scores in ``hb:{B}:dense`` (member = the score printed as an integer,
  score = the stored score) with a count per score in ``hb:{B}:counts``: a dense rank is one ZCOUNT.
- ``hb:{B}:pmeta`` maps a player to its display metadata (a JSON object, at most 512 bytes encoded).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

Order = Literal["desc", "asc"]
Operator = Literal["incr", "decr", "set", "best"]
Ties = Literal["shared", "dense", "earliest", "lexical"]
ORDERS: tuple[Order, ...] = get_args(Order)
OPERATORS: tuple[Operator, ...] = get_args(Operator)
TIES: tuple[Ties, ...] = get_args(Ties)

#: Width of the tie time at the start of an ``earliest`` member: every ms time up to 2^53 - 1 has 16 digits.
TIE_DIGITS = 16


class DefinitionError(ValueError):
    """A definition that cannot be (or can no longer be) what was asked; the message says why."""


@dataclass(frozen=True, slots=True)
class BoardDef:
    order: Order = "desc"
    operator: Operator = "incr"
    ties: Ties = "shared"

    def __post_init__(self) -> None:
        for name, value, allowed in (("order", self.order, ORDERS), ("operator", self.operator, OPERATORS),
                                     ("ties", self.ties, TIES)):  # fmt: skip
            if value not in allowed:
                raise DefinitionError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")

    @property
    def spec(self) -> str:
        """The canonical one-string form, compared by the flush scripts: ``desc/incr/shared``."""
        return f"{self.order}/{self.operator}/{self.ties}"

    @property
    def summable(self) -> bool:
        """Events of the board's own operator fold by ``+=`` and flush by ZINCRBY (the fast path)."""
        return self.operator == "incr" and self.ties in ("shared", "lexical")

    @property
    def earliest(self) -> bool:
        return self.ties == "earliest"

    @property
    def sign(self) -> int:
        """Stored score = sign x score (see the module docstring)."""
        return -1 if self.earliest and self.order == "desc" else 1

    @property
    def reverse(self) -> bool:
        """Read highest-stored-first (ZREVRANGE)?"""
        return self.order == "desc" and not self.earliest

    def as_dict(self) -> dict[str, str]:
        return {"order": self.order, "operator": self.operator, "ties": self.ties}


DEFAULT = BoardDef()


def from_spec(spec: str) -> BoardDef:
    parts = spec.split("/")
    if len(parts) != 3:
        raise DefinitionError(f"a definition spec is order/operator/ties, got {spec[:60]!r}")
    return BoardDef(*parts)  # type: ignore[arg-type]  # validated in __post_init__


def from_hash(fields: Mapping[bytes, bytes] | Mapping[str, str]) -> BoardDef:
    """``HGETALL hb:{B}:def`` -> the definition (an empty hash: the default). Raises DefinitionError when the
    stored hash is not one hotboard wrote."""
    if not fields:
        return DEFAULT
    text = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()}  # fmt: skip
    spec = text.get("spec")
    if spec is None:
        raise DefinitionError("stored definition has no spec field")
    return from_spec(spec)


def to_hash(definition: BoardDef, created_ms: int) -> dict[str, str]:
    return {**definition.as_dict(), "spec": definition.spec, "created": str(created_ms)}
