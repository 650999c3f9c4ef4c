"""The Redis layout is a contract with the read API and ops: pin it."""

from __future__ import annotations

import zlib

import pytest

from archive import lowering, staging
from hotboard import keys, lua


def test_layout() -> None:
    assert keys.board_key("global") == "hb:{global}"
    assert keys.applied_key("global") == "hb:{global}:applied"
    assert keys.meta_key("global") == "hb:{global}:meta"
    assert keys.watermark_field("scores", 3) == "scores:3"
    assert keys.watermark_field("scores", 3, epoch=2) == "scores:3:2"
    # the checkpoint hash's per-partition fields; the Lua scripts build the same names from the partition
    assert (keys.halt_field(3), keys.epoch_field(3), keys.gen_field(3)) == ("3:halt", "3:epoch", "3:gen")
    assert "':halt'" in lua.CHECKPOINT and "':halt'" in lua.LIFT_HALT and "':epoch'" in lua.LIFT_HALT
    assert "':gen'" in lua.CHECKPOINT and "':gen'" in staging._SWAP.text and "':gen'" in lowering._LOWER.text
    assert keys.restoring_field(3) == "3:restoring"
    assert "':restoring'" in lua.CHECKPOINT and "':restoring'" in lowering._LOWER.text
    assert keys.restoring_by_field(3) == "3:restoring_by"
    assert "':restoring_by'" in lua.CHECKPOINT and "':restoring_by'" in lowering._LOWER.text
    assert keys.BOARD_INDEX_KEY == "hb:board-index"
    for make, suffix in (
        (keys.def_key, "def"),
        (keys.player_meta_key, "pmeta"),
        (keys.members_key, "members"),
        (keys.dense_key, "dense"),
        (keys.counts_key, "counts"),
    ):
        assert make("global") == "hb:{global}:" + suffix


def _slot_tag(key: str) -> str:
    start = key.index("{")
    return key[start + 1 : key.index("}", start)]


@pytest.mark.parametrize("board", ["global", "s:2026.w48", "a-b_c", "x" * 64])
def test_board_keys_share_one_cluster_hash_tag(board: str) -> None:
    tags = {_slot_tag(k(board)) for k in (keys.board_key, keys.applied_key, keys.meta_key)}
    assert tags == {board}


@pytest.mark.parametrize(
    ("board", "ok"),
    [("global", True), ("a:b.c-d_e", True), ("", False), ("x" * 65, False), ("a b", False), ("{x}", False)],
)
def test_board_rule(board: str, ok: bool) -> None:
    assert keys.is_valid_board(board) is ok


@pytest.mark.parametrize(
    ("player", "ok"),
    [
        ("p-1", True),
        ("x y", True),
        ("\u00e9\u2028", True),
        ("", False),
        ("x" * 129, False),
        ("a\tb", False),
        ("a\x9fb", False),
    ],
)
def test_player_rule(player: str, ok: bool) -> None:
    assert keys.is_valid_player(player) is ok


@pytest.mark.parametrize("board", ["g", "guild-42", "s@2026-W49", "a:b.c"])
def test_flush_keys_are_the_boards_own_key_names(board: str) -> None:
    assert keys.flush_keys(board) == (
        keys.board_key(board),
        keys.applied_key(board),
        keys.meta_key(board),
        keys.def_key(board),
    )


def test_a_boards_group_is_fixed_by_its_name() -> None:
    assert keys.group_of("guild-42") == keys.group_of("guild-42") == zlib.crc32(b"guild-42") % keys.GROUPS_ONE_NODE
    assert len({keys.group_of(f"g{b}") for b in range(10_000)}) == keys.GROUPS_ONE_NODE
