"""Stored definitions: whatever a foreign writer left in ``hb:{B}:def`` reads as a definition or as a
DefinitionError (a worker's ``bad_definition`` dead letter, a reader's 503 for that board), never another
exception that would end the process or answer 500."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hotboard.boards import DEFAULT, BoardDef, DefinitionError, from_hash, from_spec

WEEKLY = BoardDef(reset="weekly")


@pytest.mark.parametrize(
    "fields",
    [
        {b"spec": b"desc/incr/shared", b"order": b"d\xffsc"},  # a non-UTF-8 byte in any field
        {b"spec": b"desc/incr/shared|weekly|4|6\xfe"},
        {b"sp\xffec": b"desc/incr/shared"},
        {b"spec": "desc/incr/shared|weekly|\u00b2|60000".encode()},  # '²'.isdigit() is True; int('²') fails
        {b"spec": "desc/incr/shared|weekly|4|\u0661".encode()},  # an Arabic-Indic one: int() takes it, we don't
        {b"spec": b"desc/incr/shared|weekly|99999999999999999999999|0"},
        {b"spec": b"desc/incr/shared|0 0 31 2 *|4|0"},
        {b"spec": b"desc/incr/shared|not a schedule|4|0"},
        {b"spec": b"up/incr/shared"},
        {b"order": b"desc"},
    ],
)
def test_a_definition_hotboard_did_not_write_is_a_definition_error(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(DefinitionError):
        from_hash(fields)


def test_what_hotboard_writes_reads_back() -> None:
    assert from_hash({}) is DEFAULT
    assert from_hash({b"spec": WEEKLY.spec.encode(), b"created": b"1"}) == WEEKLY


_WORDS = "desc asc incr best shared dense weekly daily 4 60000 \u00b2 \u0661 -1 / | * 99999999999999999999"
_PIECES = st.sampled_from([*_WORDS.split(), "", "0 0 * * 1"])


@given(st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=10), st.binary(max_size=8))
def test_any_stored_spec_reads_or_says_why(pieces: list[str], tail: bytes) -> None:
    for spec in ("".join(pieces).encode(), "".join(pieces).encode() + tail):
        try:
            from_hash({b"spec": spec})
        except DefinitionError:
            pass
    try:
        from_spec("".join(pieces))  # as the read API's board info calls it
    except DefinitionError:
        pass
