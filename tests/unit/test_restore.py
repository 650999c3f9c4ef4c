"""What ``hotboard restore`` shows while it works: each chunk of a board's players staged (a bar on a terminal,
lines otherwise, so a million-player board shows progress) and each board restored."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis, RedisCluster

from archive import restore, staging
from archive.restore import Copied, Restored
from cli.main import main
from cli.progress import BAR
from cli.restore import Shown
from hotboard.boards import DEFAULT
from ingest.errors import TRANSIENT
from tests.unit.test_rebuild import _Out


def test_progress_is_a_bar_on_a_terminal_and_lines_otherwise() -> None:
    tty, plain = _Out(True), _Out(False)
    for bar in (tty, plain):
        out = _Out(False)
        shown = Shown(out, bar)
        for step in (Copied("global", 250, 1000), Copied("global", 1000, 1000)):
            shown.copied(step)
        shown.restored(Restored("global", 1000))
        assert out.getvalue() == "restored global: 1000 players\n"
    quarter = "#" * (BAR // 4) + "-" * (BAR - BAR // 4)
    assert tty.getvalue() == (
        f"\rrestoring global [{quarter}] 250/1000 players\rrestoring global [{'#' * BAR}] 1000/1000 players\n"
    )
    assert plain.getvalue() == "restoring global: 250/1000 players\nrestoring global: 1000/1000 players\n"


class _Cursor:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    async def fetch(self, n: int) -> list[tuple[Any, ...]]:
        taken, self._rows = self._rows[:n], self._rows[n:]
        return taken


class _Conn:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    async def fetchval(self, query: str, *args: Any) -> int:
        assert query.startswith("SELECT count(*) FROM hb_scores")
        return len(self.rows)

    async def cursor(self, query: str, *args: Any) -> _Cursor:
        return _Cursor(list(self.rows))


def test_each_chunk_of_players_is_reported_against_the_board_total(monkeypatch: pytest.MonkeyPatch) -> None:
    staged: list[int] = []

    async def stage(redis: Any, twin: Sequence[str], definition: Any, rows: Sequence[Any]) -> None:
        await asyncio.sleep(0)
        staged.append(len(rows))

    monkeypatch.setattr(restore, "CHUNK", 4)
    monkeypatch.setattr(staging, "stage_players", stage)
    rows = [(f"p{i}", i, None, None) for i in range(10)]
    heard: list[Copied] = []
    copied = asyncio.run(restore._copy_players(_Conn(rows), None, "b", [], DEFAULT, heard.append))  # type: ignore[arg-type]
    assert copied == 10 and sorted(staged) == [2, 4, 4]
    assert heard == [Copied("b", 4, 10), Copied("b", 8, 10), Copied("b", 10, 10)]


def test_a_swap_waits_for_replicas_only_on_a_cluster_asked_for_some() -> None:
    """One server has no replicas to ask and a count of 0 asks none: their swaps go out as they always did (no
    WAIT, no extra round trip); a cluster asked for replicas gets the window's WAIT (archive.staging.SwapAcks)."""
    one = Redis.from_url("redis://127.0.0.1:1/0")
    cluster = RedisCluster(host="127.0.0.1", port=1)
    assert staging.swap_acks(one, "scores", 1, 300) is None
    assert staging.swap_acks(cluster, "scores", 0, 300) is None
    assert isinstance(staging.swap_acks(cluster, "scores", 1, 300), staging.SwapAcks)


def test_an_unconfirmed_swap_is_transient() -> None:
    """A TimeoutError, as RestoreInterrupted: the command exits 3 and a worker's own restore tries again."""
    assert issubclass(staging.SwapUnconfirmed, TimeoutError) and issubclass(staging.SwapUnconfirmed, TRANSIENT)


def test_restore_refuses_replica_acks_on_one_server(capsys: pytest.CaptureFixture[str]) -> None:
    """As the worker does: one server sends no WAIT, so a required count would be silently ignored. Refused before
    anything is read (nothing listens on port 1: an accepted count would be exit 3, not 2)."""
    argv = ["restore", "--all", "--redis", "redis://127.0.0.1:1/0", "--postgres", "postgresql://127.0.0.1:1/x"]
    assert main([*argv, "--min-replica-acks", "1"]) == 2
    assert "--min-replica-acks 1 needs --redis-cluster" in capsys.readouterr().err
