"""Helpers shared by the read API tests: the reference ranking, an in-process client, a real server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import jsonschema_rs
from prometheus_client import generate_latest
from starlette.applications import Starlette

from cli.process import LOOPBACK, Child, free_port, url_answers
from ingest.worker import Worker
from reader_api.openapi import REF, document
from tests.integration.harness import worker_settings

_SCHEMAS = document("hotboard API", "test", "", 8192, writes=True)["components"]


def conforms(body: object, answer: type) -> None:
    """``body`` is valid against the OpenAPI schema of its answer type (reader_api.answers), as served."""
    jsonschema_rs.validate({"$ref": REF.format(model=answer.__name__), "components": _SCHEMAS}, body)


def reference_ranking(
    scores: Mapping[str, int], order: str = "desc", ties: str = "shared", times: Mapping[str, int] | None = None
) -> list[tuple[int, str, int]]:
    """(rank, player, score) in the order the API lists a board (hotboard.boards), computed the slow obvious way:
    best score first by ``order``; among equal scores ``earliest`` lists the earliest ``times`` first (then the id
    bytes), the others Redis's order of the id bytes (reversed on desc, as ZREVRANGE). ``shared`` ranks are 1 +
    the number of strictly better players, ``dense`` 1 + the number of strictly better distinct scores, the
    others positions."""
    desc = order == "desc"
    if ties == "earliest":
        assert times is not None
        ordered = sorted(scores.items(), key=lambda kv: (-kv[1] if desc else kv[1], times[kv[0]], kv[0].encode()))
    else:
        ordered = sorted(scores.items(), key=lambda kv: (kv[1], kv[0].encode()), reverse=desc)

    def better(a: int, b: int) -> bool:
        return a > b if desc else a < b

    out = []
    for i, (player, score) in enumerate(ordered):
        if ties == "shared":
            rank = 1 + sum(better(s, score) for s in scores.values())
        elif ties == "dense":
            rank = 1 + len({s for s in scores.values() if better(s, score)})
        else:
            rank = i + 1
        out.append((rank, player, score))
    return out


@contextlib.asynccontextmanager
async def asgi_client(app: Starlette, raise_app_exceptions: bool = True) -> AsyncIterator[httpx.AsyncClient]:
    """httpx's ASGITransport does not run the lifespan; run it around the client. ``raise_app_exceptions=False``:
    see the 500 a server would send where Starlette re-raises after answering."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        async with httpx.AsyncClient(transport=transport, base_url="http://hotboard.test") as client:
            yield client


def metrics_text(client: httpx.AsyncClient) -> str:
    """What Prometheus would scrape from the app behind an :func:`asgi_client` (an in-process app opens no ops
    port: its registry is read directly)."""
    transport = client._transport  # the ASGITransport asgi_client built
    assert isinstance(transport, httpx.ASGITransport) and isinstance(transport.app, Starlette)
    return generate_latest(transport.app.state.metrics.registry).decode()


@dataclass(frozen=True)
class ApiServer:
    url: str
    port: int
    pid: int
    #: The ops port (``GET /metrics``), never the client port.
    metrics_port: int


@contextlib.contextmanager
def api_server(
    redis_url: str, log_dir: Path, *extra: str, env: Mapping[str, str] | None = None, timeout_s: float = 20.0
) -> Iterator[ApiServer]:
    """``hotboard api`` as a child process on a free loopback port, ``env`` added to its environment."""
    port, metrics_port = free_port(), free_port()
    child_env = {**os.environ, "HOTBOARD_REDIS": redis_url, **(env or {})}
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "api",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--api-metrics-port",
        str(metrics_port),
        *extra,
    ]
    base = f"http://{LOOPBACK}:{port}"
    ready = partial(url_answers, f"{base}/healthz")
    child = Child("hotboard api", command, log_path=log_dir / f"api-{port}.log", env=child_env, ready=ready)
    with child.start(timeout_s):
        assert child.proc is not None
        yield ApiServer(base, port, child.proc.pid, metrics_port)


@contextlib.contextmanager
def api_process(redis_url: str, log_dir: Path, *extra: str, timeout_s: float = 20.0) -> Iterator[str]:
    """``hotboard api`` as a child process on a free loopback port; yields its base URL."""
    with api_server(redis_url, log_dir, *extra, timeout_s=timeout_s) as server:
        yield server.url


@contextlib.asynccontextmanager
async def running_worker(kafka: str, redis_url: str, topic: str) -> AsyncIterator[Worker]:
    """An in-process worker on ``topic`` (200 ms windows) for as long as the block runs."""
    settings = worker_settings(kafka, redis_url, topic, f"api-{os.getpid()}-{topic}")
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
