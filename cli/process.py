"""One way to run a child process, for the dev stack, the demo, the tests and the benchmarks: start it with
its output in a log file, wait until it is ready (a port open, a URL answering), stop it (SIGTERM, then
SIGKILL after a grace period)."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

LOOPBACK = "127.0.0.1"


class StartError(RuntimeError):
    """A child process could not start: it exited, or did not become ready in time."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def bind_error(host: str, port: int) -> str | None:
    """Why a server could not bind ``host:port`` now (as servers do, with SO_REUSEADDR), or None if it can: a
    command checks its ports before it starts anything, so a taken one is a line naming it, not a traceback."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def url_answers(url: str, timeout_s: float = 0.5) -> bool:
    """GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status) == 200
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, HTTP error status, garbage
        return False


def spawn(
    command: Sequence[str],
    log_path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
    quiet: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` with stdin closed and stdout+stderr appended to ``log_path``; with None, the child
    shares this process's output (``quiet``: discards it)."""
    if log_path is None:
        out = subprocess.DEVNULL if quiet else None
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=new_session
        )
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=new_session,
        )


def wait_ready(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], *, name: str, timeout_s: float, log_path: Path | None
) -> None:
    """Poll ``ready`` until it holds; raise :class:`StartError` if the process exits or the time runs out."""
    where = f"; see {log_path}" if log_path is not None else ""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise StartError(f"{name} exited with {proc.returncode}{where}")
        if time.monotonic() > deadline:
            raise StartError(f"{name} did not become ready within {timeout_s:.0f}s{where}")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 10.0, sig: int = signal.SIGTERM) -> int:
    """``sig`` (SIGTERM: drain and exit), wait up to ``grace_s``, then SIGKILL; returns the exit code. A
    stopped (SIGSTOP) process is continued so that it can handle the signal."""
    return stop_all([proc], grace_s, sig)[0]


def stop_all(procs: Iterable[subprocess.Popen[bytes]], grace_s: float = 10.0, sig: int = signal.SIGTERM) -> list[int]:
    """:func:`stop_process` for several at once, signalled in the order given, sharing one grace period."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(sig)
            proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.returncode for proc in procs]


class Child:
    """``with Child(name, command, ready=...).start() as child``: a started, ready child, stopped at exit.

    A child runs in a session of its own (``new_session``), so a terminal's Ctrl-C, which goes to the whole
    foreground process group, reaches only its owner: the owner decides how the child stops (one SIGTERM),
    instead of the child receiving the terminal's SIGINT and the owner's SIGTERM as two stop requests."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        ready: Callable[[], bool] | None = None,
        new_session: bool = True,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = env
        self.ready = ready or (lambda: True)
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 20.0) -> Self:
        self.proc = spawn(self.command, self.log_path, env=self.env, new_session=self.new_session)
        try:
            wait_ready(self.proc, self.ready, name=self.name, timeout_s=timeout_s, log_path=self.log_path)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; the exit code (None if it never started)."""
        if self.proc is None:
            return None
        code = stop_process(self.proc, grace_s)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 0.0, signal.SIGKILL)
        self.proc = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
