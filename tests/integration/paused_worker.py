"""``hotboard worker`` with two test hooks, as a real OS process a test can SIGKILL at a chosen moment:

- ``HB_TEST_LOG_START``: retention, simulated as :func:`tests.integration.harness.log_starts_at` does in-process
  (the embedded broker has no DeleteRecords): every partition's log is said to start no earlier than this.
- ``HB_TEST_PAUSE_SWAP`` (a board) and ``HB_TEST_PAUSED`` (a path): right before a restore swaps that board in,
  the path is created and the swap waits forever, so the test kills the process between two swaps.

Run as ``python -m tests.integration.paused_worker`` with the worker's environment (``HOTBOARD_*``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from archive import staging
from cli.main import main


def _log_starts_at(start: int) -> None:
    real = AIOKafkaConsumer.beginning_offsets

    async def beginning_offsets(self: AIOKafkaConsumer, partitions: list[TopicPartition]) -> dict[Any, int]:
        return {tp: max(o, start) for tp, o in (await real(self, partitions)).items()}

    AIOKafkaConsumer.beginning_offsets = beginning_offsets


def _pause_before_swap(board: str, paused: Path) -> None:
    real = staging.swap

    async def swap(redis: Any, topic: str, live: Sequence[str], *args: Any, **kwargs: Any) -> None:
        if list(live) == staging.live_keys(board):
            await asyncio.to_thread(paused.touch)
            await asyncio.Event().wait()  # until SIGKILL
        await real(redis, topic, live, *args, **kwargs)

    staging.swap = swap


if __name__ == "__main__":
    if start := os.environ.get("HB_TEST_LOG_START"):
        _log_starts_at(int(start))
    if board := os.environ.get("HB_TEST_PAUSE_SWAP"):
        _pause_before_swap(board, Path(os.environ["HB_TEST_PAUSED"]))
    sys.exit(main(["worker"]))
