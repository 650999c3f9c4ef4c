"""Player ids may contain ``/``. Sent percent-encoded (``%2F``), the server decodes it before routing and
the id would span two path segments. This middleware re-decodes such paths segment by segment from
``raw_path`` and carries a decoded ``/`` as :data:`~reader_api.params.ENCODED_SLASH`, which the handlers
turn back into ``/``. A real control character ``\\x1f`` sent as ``%1F`` is mapped to NUL first, so it still
fails validation instead of aliasing a ``/``. Paths without ``%2F``/``%1F`` pass untouched.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from reader_api.params import ENCODED_SLASH


def _needs_rewrite(raw: bytes) -> bool:
    lowered = raw.lower()
    return b"%2f" in lowered or b"%1f" in lowered


def rewrite(raw_path: bytes) -> str:
    """``/v1/boards/b/players/a%2Fb`` -> ``/v1/boards/b/players/a\\x1fb``."""
    text = raw_path.split(b"?", 1)[0].decode("ascii", "replace")
    return "/".join(
        unquote(segment).replace(ENCODED_SLASH, "\x00").replace("/", ENCODED_SLASH) for segment in text.split("/")
    )


class EncodedSlashMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw and _needs_rewrite(raw):
                scope = {**scope, "path": rewrite(raw)}
        await self.app(scope, receive, send)
