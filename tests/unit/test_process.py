"""The one child-process helper: start, wait until ready, stop with SIGTERM then SIGKILL after the grace."""

from __future__ import annotations

import signal
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from cli.process import Child, StartError, free_port, port_open, stop_all, url_answers

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
STUBBORN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"]


def test_ready_on_a_port_then_stopped_by_sigterm(tmp_path: Path) -> None:
    port = free_port()
    server = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    with Child("http.server", server, log_path=tmp_path / "log", ready=partial(port_open, port)).start(20) as child:
        assert child.running and url_answers(f"http://127.0.0.1:{port}/")
        proc = child.proc
    assert proc is not None and proc.returncode == -signal.SIGTERM
    assert not port_open(port) and not url_answers(f"http://127.0.0.1:{port}/")


def test_sigkill_after_the_grace_when_sigterm_is_ignored() -> None:
    child = Child("stubborn", STUBBORN).start()
    time.sleep(0.3)  # let it install its handler
    started = time.monotonic()
    assert child.stop(grace_s=0.5) == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_a_frozen_child_still_stops() -> None:
    child = Child("frozen", SLEEPER).start()
    assert child.proc is not None
    child.proc.send_signal(signal.SIGSTOP)
    assert child.stop(grace_s=5) == -signal.SIGTERM


def test_exit_before_ready_names_the_log(tmp_path: Path) -> None:
    failing = [sys.executable, "-c", "raise SystemExit(7)"]
    with pytest.raises(StartError, match=r"exited with 7; see .*log"):
        Child("failing", failing, log_path=tmp_path / "log", ready=lambda: False).start(10)


def test_not_ready_in_time_is_stopped() -> None:
    child = Child("never ready", SLEEPER, ready=lambda: False)
    with pytest.raises(StartError, match="did not become ready within 0s"):
        child.start(timeout_s=0.2)
    assert child.proc is None


def test_stop_all_shares_one_grace_period() -> None:
    procs = [proc for proc in (Child(f"s{i}", STUBBORN).start().proc for i in range(3)) if proc is not None]
    time.sleep(0.3)
    started = time.monotonic()
    assert stop_all(procs, grace_s=0.5) == [-signal.SIGKILL] * 3
    assert time.monotonic() - started < 3
