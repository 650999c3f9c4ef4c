"""What a worker makes sure of before it joins the consumer group: its ops port is its own, and Redis answers
(and never evicts a key). A failure here is one line and an exit code, before any partition moves between
members of the fleet."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry

from flusher.server import require_noeviction
from hotboard.redis_client import Client
from hotboard.safe_text import redact_url
from hotboard.timing import Backoff
from ingest.errors import TRANSIENT
from ingest.ops_http import serve_ops
from ingest.settings import WorkerSettings

log = logging.getLogger("hotboard.worker")

#: Waiting for Redis at start retries with backoff up to this delay.
START_BACKOFF_CAP_S = 2.0


class OpsPortTaken(RuntimeError):
    """The ops port (``--metrics-port``) is held by another process: a settings conflict, exit 2."""


class RedisUnavailable(RuntimeError):
    """Redis did not answer within ``redis_start_timeout_s``: exit 3, like an unreachable Kafka."""


def bind_ops(
    s: WorkerSettings, registry: CollectorRegistry, ready: Callable[[], bool], alive: Callable[[], bool]
) -> WSGIServer:
    """Serve ``/metrics`` and the probes; raises :class:`OpsPortTaken` naming the port when it is in use."""
    try:
        return serve_ops(s.metrics_host, s.metrics_port, registry, ready, alive, s.ops_timeout_s)
    except OSError as exc:
        raise OpsPortTaken(
            f"metrics port {s.metrics_port} on {s.metrics_host} is not available ({exc.strerror or exc}); "
            "pick another with --metrics-port (HOTBOARD_METRICS_PORT), or 0 to turn it off"
        ) from None


async def wait_for_redis(redis: Client, s: WorkerSettings) -> None:
    """Read Redis's eviction policy, retrying with backoff until ``redis_start_timeout_s``. Raises
    :class:`RedisUnavailable` with what Redis last answered, or ``EvictionPolicyError`` (a Redis that may evict
    is refused at once: waiting will not change its policy)."""
    where = redact_url(s.redis)
    deadline = time.monotonic() + s.redis_start_timeout_s
    backoff = Backoff(cap_s=START_BACKOFF_CAP_S)
    while True:
        try:
            async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                await require_noeviction(redis)
            return
        except TRANSIENT as exc:  # an attempt past the deadline is a TimeoutError, an OSError
            delay = backoff.next_delay()
            if time.monotonic() + delay >= deadline:
                raise RedisUnavailable(
                    f"Redis at {where} did not answer within {s.redis_start_timeout_s:.0f}s: {exc!r}"
                ) from None
            log.warning("Redis not reachable yet at %s (%r); retrying in %.1fs", where, exc, delay)
            await asyncio.sleep(delay)
