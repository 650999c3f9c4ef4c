"""Consistency tokens: where accepted events landed in the topic, handed back to the client so that a later read
can wait until the boards cover them (``?after=``).

A token is the highest offset the write got in each partition, ``{partition: offset}``. On the wire it is
URL-safe, ``p.o_p.o`` (partition.offset pairs by partition), and opaque to clients: they only pass it back, so
its form is free to change. Its exact pattern (:data:`PATTERN`) is in the OpenAPI document, so any token the
schema allows is one this API reads. Merging keeps the highest offset per partition, so one token can stand
for several writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from reader_api.errors import invalid

#: Partitions a token may name (a topic with more is unusual; the bound keeps a token's decoding small).
MAX_PARTITIONS = 4096
_PAIR_RE = r"[0-9]{1,9}\.[0-9]{1,19}"
PATTERN = f"^({_PAIR_RE}(_{_PAIR_RE}){{0,{MAX_PARTITIONS - 1}}})?$"
_PAIR = re.compile(r"([0-9]{1,9})\.([0-9]{1,19})")

Marks = dict[int, int]


def merge(marks: Iterable[tuple[int, int]], into: Marks | None = None) -> Marks:
    """``(partition, offset)`` pairs -> the highest offset per partition."""
    out: Marks = {} if into is None else into
    for partition, offset in marks:
        if offset > out.get(partition, -1):
            out[partition] = offset
    return out


def encode(marks: Mapping[int, int]) -> str:
    """``{0: 41, 3: 7}`` -> ``0.41_3.7``; an empty write gets the empty token (covered at once)."""
    return "_".join(f"{p}.{o}" for p, o in sorted(marks.items()))


def decode(token: str, parameter: str = "after") -> Marks:
    """The marks of a token this API handed out; anything else is a 422 naming ``parameter``."""
    if token == "":
        return {}
    marks: Marks = {}
    for pair in token.split("_"):
        found = _PAIR.fullmatch(pair)
        if found is None or len(marks) >= MAX_PARTITIONS:
            raise invalid(parameter, "is not a token of this API")
        merge([(int(found[1]), int(found[2]))], marks)
    return marks
