"""The ASGI app. Everything with a lifetime (Redis pool, cache, metrics registry) belongs to one app
instance and lives in its lifespan: no module globals, so tests build as many independent apps as they like.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.applications import Starlette
from starlette.middleware import Middleware

from hotboard import redis_connect
from hotboard.redis_client import Client
from reader_api import errors, ops_port
from reader_api.cache import PageCache
from reader_api.consistency import AfterWaits
from reader_api.fastpath import FastPath
from reader_api.metrics import ApiMetrics, MetricsMiddleware
from reader_api.openapi import document
from reader_api.paths import EncodedSlashMiddleware
from reader_api.producer import EventProducer
from reader_api.reader import Reader
from reader_api.routes import routes
from reader_api.seasons import Clock, wall_clock_ms
from reader_api.settings import ApiSettings
from reader_api.streams import RedisReads, StreamMetrics, Streams
from reader_api.waits import Watermarks
from reader_api.write_metrics import WriteMetrics
from reader_api.writes import Writes

DESCRIPTION = """Read-only leaderboard queries over the hotboard Redis layout.

* Ranks are 1-based and follow the board's definition (`GET /v1/boards/{board}`): `order` desc ranks the
  highest score first, asc the lowest. **Ties** (`ties`): `shared` (the default) gives equal scores one rank,
  1, 2, 2, 4; `dense` 1, 2, 2, 3; `earliest` ranks the player who reached the score first higher (then by id),
  every rank distinct; `lexical` keeps Redis's order of the ids, every rank distinct. Entries are always listed
  best first, so paging is stable.
* Every entry and player answer carries `meta`, the player's display metadata (a JSON object), or null.
* Every answer is one consistent snapshot of the board (one atomic Redis script): rank, score, neighbours,
  total and `as_of` always belong together.
* `as_of` is the time (ms since the epoch) the last window was applied; null if the board was never flushed.
* Seasons: on a board that resets, every board endpoint takes `period` (`current`, the default, from the
  API's clock; `previous`; or a period id) and answers that period with `period` set; the kept periods that
  exist are listed by `GET /v1/boards/{board}/periods`.
"""


#: The document's title: the writes are served only with ``--kafka``.
TITLES = {False: "hotboard read API", True: "hotboard API"}


def connect(settings: ApiSettings) -> Client:
    """A bounded pool that waits briefly for a free connection and retries a broken one once (every read is
    idempotent), so a Redis restart costs one reconnect, and a Redis outage a fast 503. On a Redis Cluster,
    ``--read-from replica`` sends the reads to the replicas of each board's slot."""
    timeout = settings.api_redis_timeout_s
    if settings.redis_cluster:
        return redis_connect.connect(
            settings,
            read_from_replicas=settings.api_read_from == "replica",
            max_connections=settings.api_redis_max_connections,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    pool = BlockingConnectionPool.from_url(
        settings.redis,
        **redis_connect.connection_kwargs(settings),
        max_connections=settings.api_redis_max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
    )
    return Redis.from_pool(pool)


def create_app(
    settings: ApiSettings,
    redis: Client | None = None,
    clock: Clock = wall_clock_ms,
    *,
    serve_metrics: bool = False,
    producer: EventProducer | None = None,
) -> Starlette:
    """``redis``: use this client (the caller owns and closes it) instead of connecting to ``settings.redis``;
    ``clock``: ms since the epoch, which decides the current period of a board that resets (tests pin it);
    ``serve_metrics``: open ``settings.api_metrics_port`` for the app's lifetime (the ``hotboard api`` process
    does; apps built in-process read ``app.state.metrics`` instead of taking a port); ``producer``: the Kafka
    producer of the writes (default: one to ``settings.kafka``). With ``settings.kafka`` set the app writes."""
    metrics = ApiMetrics()
    write_metrics = WriteMetrics(metrics.registry)
    stream_metrics = StreamMetrics(metrics.registry)
    writing = bool(settings.kafka)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        outermost: object = app.user_middleware[0].cls
        if outermost is not FastPath:  # app.add_middleware() would insert in front of it
            raise RuntimeError("FastPath must stay the outermost middleware (see create_app)")
        scrape = None  # first: a taken port fails the start before anything needs closing
        if serve_metrics and settings.api_metrics_port:  # Prometheus's port, never the clients' one
            host, port, timeout_s = settings.api_metrics_host, settings.api_metrics_port, settings.api_head_timeout_s
            scrape = await ops_port.serve(host, port, metrics.registry, timeout_s)
        client = redis if redis is not None else connect(settings)
        cache = PageCache(settings.api_cache_size, settings.api_cache_max_bytes)
        reader = app.state.reader = Reader(client, cache, metrics, clock)
        watermarks = Watermarks(client, settings.topic, settings.api_wait_poll_ms / 1000)
        reader.after = AfterWaits(watermarks, settings.api_wait_ms, settings.api_max_wait_ms, write_metrics)
        streams = app.state.streams = Streams(stream_metrics, settings, RedisReads(client))
        writes = None
        if writing:
            writes = app.state.writes = Writes(settings, client, reader, watermarks, write_metrics, producer)
            writes.start()
        try:
            yield
        finally:
            await streams.close()
            if writes is not None:
                await writes.close()
            await watermarks.close()
            if scrape is not None:
                scrape.close()
            if redis is None:
                await client.aclose()

    middleware = [
        # 1. Outermost, always: the fast path reads the raw path before EncodedSlashMiddleware rewrites it,
        #    answers (and counts) its requests itself, and hands everything else unchanged to the rest.
        Middleware(FastPath, metrics=metrics, retry_after_s=settings.api_retry_after_s),
        # 2. The full app: the path rewrite, then the metrics of every request the fast path handed over.
        Middleware(EncodedSlashMiddleware),
        Middleware(MetricsMiddleware, metrics=metrics),
    ]
    app = Starlette(
        routes=routes(writing),
        middleware=middleware,
        exception_handlers=errors.handlers(settings.api_retry_after_s),
        lifespan=lifespan,
    )
    # No trailing-slash redirects: Starlette builds them from the Host header, which a client controls.
    app.router.redirect_slashes = False
    app.state.metrics = metrics
    app.state.openapi = orjson.dumps(
        document(
            TITLES[writing],
            "1.0.0",
            DESCRIPTION,
            settings.api_max_request_line_bytes,
            writing,
            settings.api_max_wait_ms,
        )
    )
    return app
