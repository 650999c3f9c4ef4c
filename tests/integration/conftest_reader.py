"""Helpers shared by the read API tests: the reference ranking, an in-process client, a real server."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import FastAPI

from hotboard.devstack import LOOPBACK, free_port, stop_process


def reference_ranking(scores: Mapping[str, int]) -> list[tuple[int, str, int]]:
    """(rank, player, score): highest score first, equal scores reverse lexicographic by UTF-8 bytes of the id
    (the order of ZREVRANGE), ranks 1-based and distinct."""
    ordered = sorted(scores.items(), key=lambda kv: (kv[1], kv[0].encode()), reverse=True)
    return [(i + 1, player, score) for i, (player, score) in enumerate(ordered)]


@contextlib.asynccontextmanager
async def asgi_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """httpx's ASGITransport does not run the lifespan; run it around the client."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hotboard.test") as client:
            yield client


@dataclass(frozen=True)
class ApiServer:
    url: str
    port: int
    pid: int


@contextlib.contextmanager
def api_server(
    redis_url: str, log_dir: Path, *extra: str, env: Mapping[str, str] | None = None, timeout_s: float = 20.0
) -> Iterator[ApiServer]:
    """``hotboard api`` as a child process on a free loopback port, ``env`` added to its environment."""
    port = free_port()
    child_env = {**os.environ, "HOTBOARD_REDIS": redis_url, **(env or {})}
    command = [sys.executable, "-m", "hotboard.cli", "api", "--host", LOOPBACK, "--port", str(port), *extra]
    with (log_dir / f"api-{port}.log").open("ab") as log:
        proc = subprocess.Popen(command, env=child_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"hotboard api exited with {proc.returncode}; see {log_dir}")
            try:
                if httpx.get(f"{base}/healthz", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"hotboard api did not answer within {timeout_s:.0f}s")
            time.sleep(0.05)
        yield ApiServer(base, port, proc.pid)
    finally:
        stop_process(proc)


@contextlib.contextmanager
def api_process(redis_url: str, log_dir: Path, *extra: str, timeout_s: float = 20.0) -> Iterator[str]:
    """``hotboard api`` as a child process on a free loopback port; yields its base URL."""
    with api_server(redis_url, log_dir, *extra, timeout_s=timeout_s) as server:
        yield server.url
