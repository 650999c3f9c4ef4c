"""What a long command shows while it works (``hotboard rebuild``, ``hotboard restore``): a bar redrawn in place
on a terminal, one plain line per step otherwise (logs, CI)."""

from __future__ import annotations

from typing import TextIO

#: Characters of the progress bar on a terminal.
BAR = 30


class Progress:
    """Steps of ``done`` out of ``total``: a bar on a terminal (ended by a newline once ``done`` reaches
    ``total``), the step's own ``line`` otherwise."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()

    def step(self, label: str, done: int, total: int, unit: str, line: str) -> None:
        if self._tty:
            filled = BAR * min(done, total) // max(total, 1)
            bar = "#" * filled + "-" * (BAR - filled)
            self._out.write(f"\r{label} [{bar}] {done}/{total} {unit}")
            if done >= total:
                self._out.write("\n")
        else:
            self._out.write(f"{line}\n")
        self._out.flush()
