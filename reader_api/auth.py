"""Who may write, and how fast: bearer tokens compared in constant time, and a token bucket per token.

Reads stay open. With no token configured the write endpoints answer 403: an API opened to Kafka by
``--kafka`` alone must not accept anonymous writes.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from reader_api.errors import ApiError

Clock = Callable[[], float]
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="hotboard"'}


def load_tokens(inline: str, path: str) -> list[str]:
    """Tokens from the comma-separated setting and from a file (one per line, blank lines and ``#`` ignored)."""
    tokens = [t.strip() for t in inline.split(",")]
    if path:
        tokens += [line.strip() for line in Path(path).read_text().splitlines() if not line.startswith("#")]
    return [t for t in tokens if t]


@dataclass(frozen=True, slots=True)
class Writer:
    """An authenticated writer: ``scope`` names it without its secret (idempotency keys and buckets use it)."""

    scope: str


class WriteAuth:
    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens = [(t.encode(), hashlib.sha256(t.encode()).hexdigest()[:16]) for t in dict.fromkeys(tokens)]

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def check(self, authorization: str | None) -> Writer:
        """The writer of a request's ``Authorization`` header; 403 when no token is configured, 401 (with a
        Bearer challenge) when the header is missing or names no configured token."""
        if not self._tokens:
            raise ApiError(403, "writes_disabled", "no write token is configured: writes are refused")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, "unauthorized", "a bearer token is required", headers=_CHALLENGE)
        presented = given.strip().encode()
        found: str | None = None
        for secret, scope in self._tokens:  # every token compared, so the time says nothing about which
            if hmac.compare_digest(secret, presented):
                found = scope
        if found is None:
            raise ApiError(401, "unauthorized", "the bearer token is not valid", headers=_CHALLENGE)
        return Writer(found)


class RateLimiter:
    """A token bucket per writer: ``rate`` events per second, at most ``burst`` at once. A request costs its
    number of events; one that does not fit is refused whole (429) with the seconds until it would."""

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # scope -> (tokens, at)

    def take(self, scope: str, cost: int) -> None:
        now = self._clock()
        tokens, at = self._buckets.get(scope, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        cost = max(1, min(cost, self.burst))  # a request larger than the bucket waits for a full one
        if tokens < cost:
            self._buckets[scope] = (tokens, now)
            retry_s = max(1, math.ceil((cost - tokens) / self.rate))
            raise ApiError(
                429,
                "rate_limited",
                f"this token may send {self.rate:g} events/s (bursts of {self.burst}); retry in {retry_s}s",
                headers={"Retry-After": str(retry_s)},
            )
        self._buckets[scope] = (tokens - cost, now)
