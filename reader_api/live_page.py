"""``GET /``: a page that shows a board live (``/?board=NAME``, with ``&player=P`` their neighbourhood too), from
the streams (:mod:`reader_api.sse`). Three plain files in the package (``reader_api/static/``): no build step,
nothing loaded from anywhere but the API, which the Content-Security-Policy holds the browser to."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

from reader_api.errors import error_response

STATIC = Path(__file__).parent / "static"
#: The only files served; nothing else of the folder is reachable.
ASSETS = {"live.js": "text/javascript", "live.css": "text/css"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "Cache-Control": "max-age=300",
}


async def page(request: Request) -> Response:
    return FileResponse(STATIC / "live.html", media_type="text/html; charset=utf-8", headers=_HEADERS)


async def asset(request: Request) -> Response:
    name = request.path_params["asset"]
    if name not in ASSETS:
        return error_response(404, "not_found", "No such file")
    return FileResponse(STATIC / name, media_type=ASSETS[name], headers=_HEADERS)
