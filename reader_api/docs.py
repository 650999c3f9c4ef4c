"""``/docs``: Swagger UI over ``/openapi.json``, its files served by the API itself from the installed
``drf-spectacular-sidecar`` package (the ``docs`` extra: Swagger UI's dist files, 5.x, which reads the OpenAPI
3.1 document), so the page works offline. The product install ships no page assets: without the extra,
``/docs`` answers 404 and the contract stays at ``/openapi.json``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response

from reader_api.errors import error_response

#: The only files the page loads; nothing else of the bundle is reachable.
ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript"}

PAGE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>hotboard read API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true});</script>
</body>
</html>
"""


#: Where the package keeps Swagger UI's dist files, relative to the package folder.
_PACKAGE, _DIST = "drf_spectacular_sidecar", ("static", "drf_spectacular_sidecar", "swagger-ui-dist")


def asset_dir() -> Path | None:
    """The folder of Swagger UI's files, found without importing the package (its ``__init__`` imports Django,
    which the API does not need to serve static files)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).joinpath(*_DIST)
    return root if root.is_dir() else None


def _unavailable() -> Response:
    return error_response(404, "docs_not_installed", "Swagger UI is not installed (hotboard[docs]); see /openapi.json")


async def page(request: Request) -> Response:
    if asset_dir() is None:
        return _unavailable()
    return HTMLResponse(PAGE)


async def asset(request: Request) -> Response:
    name = request.path_params["asset"]
    root = asset_dir()
    if root is None:
        return _unavailable()
    if name not in ASSETS:
        return error_response(404, "not_found", "No such file")
    return FileResponse(root / name, media_type=ASSETS[name], headers={"Cache-Control": "max-age=86400"})
