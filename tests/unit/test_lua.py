"""The Lua scripts name their inputs in their first lines (``local board_key = KEYS[1]``), so that no Redis call
reads ``KEYS[2]`` or ``ARGV[a + 4 + 3 * n]`` that a paragraph has to explain."""

from __future__ import annotations

import re

import pytest

from hotboard import lua, lua_definitions, lua_reads

SCRIPTS = {
    f"{module.__name__}.{name}": text
    for module in (lua, lua_definitions, lua_reads)
    for name, text in vars(module).items()
    if name.isupper() and not name.startswith("_") and isinstance(text, str) and "redis.call" in text
}
#: A Redis call given an input by its position: KEYS[2], ARGV[3], ARGV[a + 4 + 3 * n].
BY_POSITION = re.compile(r"redis\.call\([^\n]*\b(?:KEYS|ARGV)\[(?:\d|[a-z]+ \+ \d)")


def test_every_script_is_found() -> None:
    assert len(SCRIPTS) == 14, sorted(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_no_redis_call_takes_an_input_by_its_position(name: str) -> None:
    assert not BY_POSITION.findall(SCRIPTS[name]), [
        line for line in SCRIPTS[name].splitlines() if BY_POSITION.search(line)
    ]


@pytest.mark.parametrize("name", [n for n in sorted(SCRIPTS) if n.startswith("hotboard.lua_reads.")])
def test_every_read_script_is_flagged_no_writes_on_its_first_line(name: str) -> None:
    assert SCRIPTS[name].startswith(lua_reads.NO_WRITES)
