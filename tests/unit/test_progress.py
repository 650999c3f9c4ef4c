"""The worker's progress line and its rate-limited dead-letter lines, on a fake clock."""

from __future__ import annotations

from ingest.progress import Counters, DeadLetterLog, Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_one_line_per_interval_over_that_interval() -> None:
    clock = Clock()
    progress = Progress(30, clock)
    assert progress.line(Counters(events=1000, windows=5, dead_letters=1, lag=0)) is None  # the baseline
    clock.now += 29.9
    assert progress.line(Counters(events=5000, windows=30, dead_letters=1, lag=7)) is None
    clock.now += 0.1
    line = progress.line(Counters(events=61_000, windows=35, dead_letters=4, lag=12_345))
    assert line == "progress: 2,000 events/s, 30 windows, lag 12,345, 3 dead letters in the last 30s"
    clock.now += 30
    assert progress.line(Counters(events=61_000, windows=35, dead_letters=4, lag=0)) == (
        "progress: 0 events/s, 0 windows, lag 0, 0 dead letters in the last 30s"
    )


def test_interval_zero_turns_both_off() -> None:
    clock = Clock()
    progress, letters = Progress(0, clock), DeadLetterLog(0, clock)
    for _ in range(3):
        clock.now += 100
        assert progress.line(Counters(1, 1, 1, 1)) is None
        assert letters.line("not_json", "p0@1", "x") is None


def test_dead_letters_log_once_per_reason_per_interval_and_count_the_rest() -> None:
    clock = Clock()
    letters = DeadLetterLog(30, clock)
    first = "dead letter not_json at partition 0 offset 1: bad"
    assert letters.line("not_json", "partition 0 offset 1", "bad") == first
    assert letters.line("bad_player", "partition 1 offset 9", "empty") is not None  # another reason: its own line
    assert [letters.line("not_json", f"partition 0 offset {i}", "bad") for i in range(2, 6)] == [None] * 4
    clock.now += 30
    assert letters.line("not_json", "partition 0 offset 7", "bad") == (
        "dead letter not_json at partition 0 offset 7: bad (4 more not_json in the last 30s not logged)"
    )
    clock.now += 31
    assert letters.line("not_json", "partition 0 offset 8", "bad") == first.replace("offset 1", "offset 8")
