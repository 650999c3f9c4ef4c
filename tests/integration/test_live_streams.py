"""Live boards over Server-Sent Events against a real ``hotboard api`` process, an in-process worker, the broker and
a real redis-server: events written through ``POST /v1/events`` come out of the streams as new board versions, in
order, with the reference ranking; the questions of a board share one version read per poll; the cap; a client
that never reads."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from reader_api.answers import Neighbourhood, TopPage
from tests.integration.reader_harness import ApiServer, api_server, conforms, reference_ranking, running_worker

pytestmark = pytest.mark.integration

TOKEN = "live-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    return topic_factory(partitions=2)


@contextlib.contextmanager
def live_api(redis_url: str, kafka: str, topic: str, tmp_path: Path, **env: str) -> Iterator[ApiServer]:
    settings = {"HOTBOARD_API_WRITE_TOKENS": TOKEN, "HOTBOARD_API_STREAM_HEARTBEAT_S": "0.5", **env}
    with api_server(redis_url, tmp_path, "--kafka", kafka, "--topic", topic, env=settings) as server:
        yield server


@dataclass
class Event:
    id: str | None
    kind: str
    data: Any


class Stream:
    """An EventSource in a test: the events parsed from one streamed response, comments counted."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.comments = 0

    async def next(self, timeout_s: float = 20.0) -> Event:
        """The next event (heartbeats are counted and skipped)."""
        fields: dict[str, str] = {}
        async with asyncio.timeout(timeout_s):
            async for line in self.lines:
                if line == "":
                    if "data" in fields:
                        return Event(fields.get("id"), fields.get("event", "message"), orjson.loads(fields["data"]))
                    fields.clear()
                elif line.startswith(":"):
                    self.comments += 1
                else:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
        raise AssertionError("the stream ended")

    async def heartbeat(self, timeout_s: float = 10.0) -> None:
        """Until a comment line arrives (none of the stream's events happen meanwhile)."""
        async with asyncio.timeout(timeout_s):
            async for line in self.lines:
                assert not line.startswith("data:"), line
                if line.startswith(":"):
                    self.comments += 1
                    return

    async def until(self, check: Callable[[Any], bool], timeout_s: float = 20.0) -> list[Event]:
        """Events until one whose data passes ``check``; all of them, in order."""
        seen: list[Event] = []
        deadline = time.monotonic() + timeout_s
        while not seen or not check(seen[-1].data):
            seen.append(await self.next(max(0.1, deadline - time.monotonic())))
        return seen


@contextlib.asynccontextmanager
async def stream(client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None) -> AsyncIterator[Stream]:
    async with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)


async def write(client: httpx.AsyncClient, events: list[dict[str, Any]]) -> None:
    """Events into the topic, answered once the board shows them (read your writes)."""
    r = await client.post("/v1/events", json=events, headers=AUTH)
    assert r.status_code == 200 and r.json()["accepted"] == len(events), r.text
    board = events[0]["board"]
    ready = await client.get(f"/v1/boards/{board}/top", params={"after": r.json()["token"], "wait_ms": 20_000})
    assert ready.status_code == 200, ready.text


def ranking(page: TopPage | Neighbourhood) -> list[tuple[int, str, int]]:
    return [(e["rank"], e["player"], e["score"]) for e in page["entries"]]


def metric(server: ApiServer, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


async def test_streams_yield_each_changed_answer_in_version_order(
    kafka: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    scores = {"ann": 30, "bob": 20, "cat": 10}
    with live_api(redis_url, kafka, topic, tmp_path) as server:
        async with running_worker(kafka, redis_url, topic), httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            await write(c, [{"board": "live", "player": p, "delta": s} for p, s in scores.items()])
            async with (
                stream(c, "/v1/boards/live/top/stream?limit=10") as top,
                stream(c, "/v1/boards/live/players/cat/around/stream?radius=1") as around,
            ):
                first = await top.next()
                conforms(first.data, TopPage)
                assert ranking(first.data) == reference_ranking(scores)
                assert (await around.next()).data["entries"][-1]["player"] == "cat"
                versions = [int(first.id or -1)]
                for player, delta in [("cat", 25), ("bob", 40), ("cat", 100)]:
                    scores[player] += delta
                    await write(c, [{"board": "live", "player": player, "delta": delta}])
                    expected = reference_ranking(scores)

                    def shows(page: TopPage, expected: list[tuple[int, str, int]] = expected) -> bool:
                        return ranking(page) == expected

                    seen = await top.until(shows)
                    versions += [int(e.id or -1) for e in seen]
                assert versions == sorted(versions) and len(set(versions)) == len(versions), versions
                # cat leads: its neighbourhood of radius 1 is itself and the second
                best_two = [r for r in reference_ranking(scores) if r[0] <= 2]
                near = await around.until(lambda page: ranking(page) == best_two)
                conforms(near[-1].data, Neighbourhood)
                await top.heartbeat()  # while nothing changes
            # resume: the version held is not sent again; the next change is
            async with stream(c, "/v1/boards/live/top/stream?limit=10", {"Last-Event-ID": str(versions[-1])}) as again:
                await write(c, [{"board": "live", "player": "dan", "delta": 1}])
                resumed = await again.next()
                assert int(resumed.id or -1) > versions[-1] and resumed.data["total"] == 4
            unknown = await c.get("/v1/boards/nope/top/stream")
            assert (unknown.status_code, unknown.json()["error"]) == (404, "board_not_found")
            absent = await c.get("/v1/boards/live/players/zed/around/stream")
            assert (absent.status_code, absent.json()["error"]) == (404, "player_not_found")


async def test_fifty_questions_on_one_board_cost_one_version_read_per_poll_and_one_round_trip_per_window(
    kafka: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    """Forty players each watching their own neighbourhood and ten clients on the top: per poll one version
    read for the board, and per applied window one pipelined round trip reading all 41 questions."""
    env = {"HOTBOARD_API_STREAM_POLL_MS": "100"}
    players = [f"p{i:02}" for i in range(40)]
    paths = [f"/v1/boards/many/players/{p}/around/stream?radius=1" for p in players]
    paths += ["/v1/boards/many/top/stream"] * 10
    with live_api(redis_url, kafka, topic, tmp_path, **env) as server:
        async with running_worker(kafka, redis_url, topic), httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            await write(c, [{"board": "many", "player": p, "delta": 1 + i} for i, p in enumerate(players)])
            async with contextlib.AsyncExitStack() as stack:
                streams = [await stack.enter_async_context(stream(c, path)) for path in paths]
                firsts = [int((await s.next()).id or -1) for s in streams]
                assert metric(server, "hotboard_api_streams_open") == 50
                names = ("version_checks", "answer_reads", "answer_round_trips")
                before = [metric(server, f"hotboard_api_stream_{n}_total") for n in names]
                started = time.monotonic()
                # the last player leads: every rank below moves, so every answer changes
                await write(c, [{"board": "many", "player": "p00", "delta": 1000}])
                for s, first in zip(streams, firsts, strict=True):
                    assert int((await s.next()).id or -1) > first
                checks, answers, trips = (
                    metric(server, f"hotboard_api_stream_{n}_total") - b for n, b in zip(names, before, strict=True)
                )
                polls = (time.monotonic() - started) / 0.1
                assert checks <= polls * 1.5 + 5, (checks, polls)  # one per poll: 41 questions would be 41
                assert (answers, trips) == (41, 1), (answers, trips)  # one window: one batch of every question
            deadline = time.monotonic() + 10
            while metric(server, "hotboard_api_streams_open") != 0:
                assert time.monotonic() < deadline, "closed streams still counted"
                await asyncio.sleep(0.05)


async def test_streams_past_the_cap_are_refused_with_retry_after(
    kafka: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    with live_api(redis_url, kafka, topic, tmp_path, HOTBOARD_API_MAX_STREAMS="2") as server:
        async with running_worker(kafka, redis_url, topic), httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            await write(c, [{"board": "cap", "player": "a", "delta": 1}])
            async with stream(c, "/v1/boards/cap/top/stream") as one, stream(c, "/v1/boards/cap/top/stream?limit=3"):
                await one.next()
                refused = await c.get("/v1/boards/cap/top/stream")
                assert (refused.status_code, refused.json()["error"]) == (503, "too_many_streams")
                assert refused.headers["Retry-After"]
                assert (await c.get("/v1/boards/cap/top")).status_code == 200  # plain reads go on
            deadline = time.monotonic() + 10
            while metric(server, "hotboard_api_streams_open") != 0:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            async with stream(c, "/v1/boards/cap/top/stream") as later:
                assert (await later.next()).data["total"] == 1
            assert metric(server, "hotboard_api_streams_refused_total") == 1


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_client_that_never_reads_is_dropped_without_growing_memory(
    kafka: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    """Top pages of 1,000 players with 200-byte metas (~250 KB an event) at every window to a socket that is
    never read: the server holds its buffers' worth, then drops the stream; a reading client goes on."""
    meta = {"name": "x" * 200}
    players = [{"board": "big", "player": f"p{i:04}", "delta": i, "meta": meta} for i in range(1000)]
    env = {"HOTBOARD_API_STREAM_SEND_TIMEOUT_S": "1.0"}
    with live_api(redis_url, kafka, topic, tmp_path, **env) as server:
        async with running_worker(kafka, redis_url, topic), httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            await write(c, players)
            baseline = rss_kib(server.pid)
            sleeper = socket.socket()
            sleeper.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sleeper.connect(("127.0.0.1", server.port))
            sleeper.sendall(b"GET /v1/boards/big/top/stream?limit=1000 HTTP/1.1\r\nHost: t\r\n\r\n")
            try:
                async with stream(c, "/v1/boards/big/top/stream?limit=5") as reader:
                    await reader.next()
                    deadline, rounds = time.monotonic() + 60, 0
                    while metric(server, "hotboard_api_streams_dropped_total") < 1:
                        assert time.monotonic() < deadline, "the stream that is never read was not dropped"
                        rounds += 1
                        await write(c, [{"board": "big", "player": f"p{rounds % 1000:04}", "delta": 5000}])
                        assert (await reader.next()).data["entries"][0]["score"] >= 5000  # the reader is served
                    assert metric(server, "hotboard_api_streams_open") == 1
                    grown = rss_kib(server.pid) - baseline
                    assert grown < 30 * 1024, f"the API grew {grown} KiB for one client that never reads"
            finally:
                sleeper.close()
