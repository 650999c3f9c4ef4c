"""``GET /`` as a person sees it: headless Chromium (Debian's, driven by Playwright) on a real ``hotboard api
--kafka``, an in-process worker, the broker and redis-server. Events go in over HTTP; the page's rows change to
the ranks the reference ranking gives for the board's order and ties, moves are marked, ``as_of`` shows, and
every file the page loaded came from the API itself. ``HOTBOARD_LIVE_SCREENSHOT=PATH`` saves the page there."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from hotboard import board_store
from hotboard.boards import BoardDef, Order, Ties
from tests.integration.reader_harness import api_server, reference_ranking, running_worker
from tests.services import unavailable

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
TOKEN = "page-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RENDER_TIMEOUT_MS = 20_000
ROWS = "sel => [...document.querySelectorAll(sel + ' tbody tr')].map(r => [Number(r.dataset.rank), r.dataset.player])"


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    return topic_factory(partitions=2)


async def write(client: httpx.AsyncClient, board: str, scores: dict[str, int], times: dict[str, int]) -> None:
    """The deltas, each player's event at its time in ``times`` (an ``earliest`` board's tie time)."""
    events = [{"board": board, "player": p, "delta": d, "ts": times[p]} for p, d in scores.items()]
    r = await client.post("/v1/events", json=events, headers=AUTH)
    assert r.status_code == 200 and r.json()["accepted"] == len(events), r.text
    ready = await client.get(f"/v1/boards/{board}/top", params={"after": r.json()["token"], "wait_ms": 20_000})
    assert ready.status_code == 200, ready.text


async def rows_become(page: Any, table: str, expected: list[tuple[int, str, int]], console: Any = ()) -> None:
    """Until the table's rows are exactly ``expected``'s (rank, player), in order: the DOM, never a sleep."""
    want = [[rank, player] for rank, player, _ in expected]
    check = f"want => JSON.stringify(({ROWS})({table!r})) === JSON.stringify(want)"
    try:
        await page.wait_for_function(check, arg=want, timeout=RENDER_TIMEOUT_MS)
    except Exception as exc:
        shown = await page.evaluate(f"({ROWS})({table!r})")
        raise AssertionError(f"{table}: rows {shown}, expected {want}; console {list(console)}") from exc


#: Event times: bea reaches 40 before cy (earliest ranks bea first, lexical desc cy), fay last.
T0 = 1_767_225_600_000
TIMES = {"ada": T0, "bea": T0 + 1000, "cy": T0 + 2000, "dot": T0 + 3000, "eve": T0 + 4000, "fay": T0 + 9000}


@pytest.mark.parametrize(
    ("order", "ties"), [("desc", "shared"), ("asc", "dense"), ("desc", "earliest"), ("asc", "lexical")]
)
async def test_the_live_page_follows_the_board_in_a_browser(
    kafka: str, topic: str, redis_url: str, tmp_path: Path, order: Order, ties: Ties
) -> None:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        unavailable("playwright")
    if shutil.which(CHROMIUM) is None:
        unavailable("chromium (scripts/install-system-deps.sh)")
    board = f"arena-{order}-{ties}"
    redis = Redis.from_url(redis_url)
    try:
        await board_store.declare(redis, board, BoardDef(order, "incr", ties))
    finally:
        await redis.aclose()
    env = {"HOTBOARD_API_WRITE_TOKENS": TOKEN}
    scores = {"ada": 50, "bea": 40, "cy": 40, "dot": 10, "eve": 5}
    times = dict(TIMES)
    with api_server(redis_url, tmp_path, "--kafka", kafka, "--topic", topic, env=env) as server:
        base = server.url
        async with running_worker(kafka, redis_url, topic), httpx.AsyncClient(base_url=base, timeout=30) as c:
            await write(c, board, scores, times)
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    page = await browser.new_page(viewport={"width": 900, "height": 720})
                    requests: list[str] = []
                    console: list[str] = []
                    page.on("request", lambda request: requests.append(request.url))
                    page.on("console", lambda message: console.append(message.text))
                    page.on("pageerror", lambda error: console.append(str(error)))
                    await page.goto(f"{base}/?board={board}&player=dot&limit=10&radius=1")
                    ranked = reference_ranking(scores, order, ties, times)
                    await rows_become(page, "#top", ranked)
                    assert await page.inner_text("#as-of") != "never flushed"
                    dot = next(i for i, r in enumerate(ranked) if r[1] == "dot")
                    await rows_become(page, "#around", ranked[max(0, dot - 1) : dot + 2], console)
                    # dot jumps to the best score; a newcomer ties with cy
                    move = {"dot": 100 if order == "desc" else -100, "fay": 40}
                    for player, delta in move.items():
                        scores[player] = scores.get(player, 0) + delta
                    times["dot"] = T0 + 9000  # dot's last change; fay's first
                    await write(c, board, move, times)
                    ranked = reference_ranking(scores, order, ties, times)
                    await rows_become(page, "#top", ranked)
                    assert await page.get_attribute("#top tr[data-player='dot']", "class") == "up changed me"
                    assert "new" in (await page.get_attribute("#top tr[data-player='fay']", "class") or "")
                    await rows_become(page, "#around", ranked[:2], console)
                    shot = tmp_path / "live-page.png"
                    await page.screenshot(path=str(shot), full_page=True)
                    if target := os.environ.get("HOTBOARD_LIVE_SCREENSHOT"):
                        shutil.copy(shot, target)
                finally:
                    await browser.close()
            assert requests and all(url.startswith(base) for url in requests), requests
            r = await c.get("/")
            assert r.headers["content-security-policy"].startswith("default-src 'self'")
            assert (await c.get("/live/missing.js")).status_code == 404
