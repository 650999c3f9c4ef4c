"""Where retention cut the log, a rebuild from it would lose events: the pure decision, as a table; and what the
command shows while it reads (a bar on a terminal, lines otherwise)."""

from __future__ import annotations

import io

import pytest

from archive.rebuild import Read, Rebuilt, log_cut
from cli.progress import BAR
from cli.rebuild import Shown


@pytest.mark.parametrize(
    ("firsts", "checkpoints", "why"),
    [
        ({0: 0, 1: 0}, {}, None),
        ({0: 0, 1: 0}, {0: 41, 1: -1}, None),
        ({0: 0, 1: 7}, {}, "partition 1 starts at offset 7: retention deleted offsets 0..6"),
        ({0: 7}, {0: 6}, "partition 0 starts at offset 7: retention deleted offsets 0..6"),
        ({0: 7}, {0: 3}, "partition 0: its checkpoint 3 lies below the log start 7"),
        ({0: 0, 1: 9}, {0: 50, 1: 2}, "partition 1: its checkpoint 2 lies below the log start 9"),
    ],
)
def test_a_log_that_no_longer_starts_at_zero_is_named(
    firsts: dict[int, int], checkpoints: dict[int, int], why: str | None
) -> None:
    assert log_cut(firsts, checkpoints) == why


class _Out(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_progress_is_a_bar_on_a_terminal_and_lines_otherwise() -> None:
    """Progress on its own stream (stderr), the boards rebuilt alone on the other (stdout), as a restore's."""
    steps = [Read(0, 50, 200), Read(1, 200, 200)]
    tty, plain = _Out(True), _Out(False)
    for bar in (tty, plain):
        out = _Out(False)
        shown = Shown(out, bar)
        for step in steps:
            shown.read(step)
        shown.rebuilt(Rebuilt("global", 7))
        assert out.getvalue() == "rebuilt global: 7 players\n"
    quarter = "#" * (BAR // 4) + "-" * (BAR - BAR // 4)
    assert tty.getvalue() == (
        f"\rreading the log [{quarter}] 50/200 records\rreading the log [{'#' * BAR}] 200/200 records\n"
    )
    assert plain.getvalue() == "read 50/200 records (partition 0)\nread 200/200 records (partition 1)\n"
