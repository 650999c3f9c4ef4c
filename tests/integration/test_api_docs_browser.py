"""``/docs`` as a person sees it: a real ``hotboard api`` on a real redis-server, opened in headless Chromium
(Debian's, installed by scripts/install-system-deps.sh). A status code says nothing about whether Swagger UI
can read the document: an OpenAPI version it does not know renders as "Unable to render this definition"."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tests.integration.reader_harness import api_process
from tests.services import unavailable

CHROMIUM = "/usr/bin/chromium"
RENDER_TIMEOUT_MS = 20_000


def test_docs_page_renders_every_operation_in_a_browser(redis_url: str, tmp_path: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright")
    if shutil.which(CHROMIUM) is None:
        unavailable("chromium (scripts/install-system-deps.sh)")
    with api_process(redis_url, tmp_path) as base:
        document = httpx.get(f"{base}/openapi.json", timeout=5).json()
        documented = {path for path, item in document["paths"].items() if "get" in item}
        assert "/v1/boards/{board}/top" in documented
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                requests: list[str] = []
                page.on("request", lambda request: requests.append(request.url))
                page.goto(f"{base}/docs")
                # Swagger UI fetches /openapi.json, then draws one .opblock per operation, or says why it cannot
                # (.version-pragma: a version it does not read; .errors-wrapper: a document it cannot parse).
                page.wait_for_selector(".opblock, .version-pragma, .errors-wrapper", timeout=RENDER_TIMEOUT_MS)
                body = page.inner_text("body")
                assert "Unable to render" not in body, body[:2000]
                assert page.locator(".errors-wrapper").count() == 0, body[:2000]
                top = page.locator(".opblock", has=page.locator('[data-path="/v1/boards/{board}/top"]'))
                assert top.count() == 1
                assert "Top of the board, paged" in top.inner_text()
                # Opened, the operation lists its parameters from the 3.1 schemas.
                top.locator(".opblock-summary").click()
                top.locator(".parameters .parameter__name").first.wait_for(timeout=RENDER_TIMEOUT_MS)
                names = top.locator(".parameter__name").evaluate_all("els => els.map(e => e.firstChild.textContent)")
                expected = {"board", "limit", "offset", "period", "after", "wait_ms"}
                assert {name.strip() for name in names} == expected, names
                assert "Could not render" not in top.inner_text()
                paths = page.locator(".opblock-summary-path")
                rendered = set(paths.evaluate_all("els => els.map(e => e.dataset.path)"))
                assert rendered == documented
                assert page.locator(".opblock-get").count() == len(documented)
            finally:
                browser.close()
        # Everything the page loaded came from the API itself: no CDN.
        assert requests and all(url.startswith(base) for url in requests), requests
