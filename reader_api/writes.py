"""The write endpoints: events over HTTP into the topic the workers consume, and update-then-rank.

``POST /v1/events`` takes up to :data:`~reader_api.write_bodies.MAX_EVENTS` events (a JSON array or NDJSON),
produces the valid ones and answers which were rejected and a consistency token. ``POST
/v1/boards/{board}/players/{player}/scores`` writes one event; with ``?wait=true`` it answers the player's
score and rank from the first board snapshot that holds the write (:mod:`reader_api.waits`).

Each request, in order: 1. the bearer token (401/403 before the body is read); 2. the body, bounded in size
and time; 3. the Idempotency-Key's claim (a retry answers here); 4. validation by the codec, then against the
board's definition (read through the reader's definition cache) as the worker's fold checks it; 5. the writer's
rate limit (then, with ``?wait=true``, the board's version: one not covering the write); 6. produce,
acknowledged by Kafka (503 within the produce timeout otherwise); 7. the answer, kept under the
Idempotency-Key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import orjson
from starlette.requests import Request
from starlette.responses import Response

from hotboard import kafka_security
from hotboard.codec import Decoder
from hotboard.redis_client import Client
from reader_api import tokens, write_bodies
from reader_api.answers import ScoreAccepted, ScoreAfterWrite, WriteAnswer
from reader_api.auth import RateLimiter, WriteAuth, Writer, load_tokens
from reader_api.consistency import wait_ms_param
from reader_api.errors import JSON, REDIS_FAILURES, ApiError, invalid
from reader_api.idempotency import Answer, Claim, Idempotency, fingerprint
from reader_api.params import check_board, check_player
from reader_api.producer import EventProducer, KafkaUnavailable, OutcomeUnknown
from reader_api.reader import Reader
from reader_api.seasons import resolve
from reader_api.settings import ApiSettings
from reader_api.snapshot import parse_header, player
from reader_api.waits import Covered, Watermarks
from reader_api.write_metrics import WriteMetrics

log = logging.getLogger("hotboard.api")

_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})


def wait_param(query: Mapping[str, str]) -> bool:
    raw = query.get("wait", "false").lower()
    if raw not in _TRUE | _FALSE:
        raise invalid("wait", "must be true or false")
    return raw in _TRUE


@dataclass(slots=True)
class Progress:
    """How far one write got towards Kafka: once records were handed over, a failure after that point must
    not free its Idempotency-Key (the retry would produce them again) nor answer an error that invites a
    retry; ``fallback`` is then the answer to give and keep instead."""

    fallback: Answer | None = None


def _unknown_outcome() -> Answer:
    message = "the request ended while its events were being produced: they may or may not be in the topic"
    return Answer(503, orjson.dumps({"error": "outcome_unknown", "message": message, "outcome": "unknown"}))


def _json(body: bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type=JSON)


class Writes:
    """What the write endpoints share for the app's lifetime."""

    def __init__(
        self,
        settings: ApiSettings,
        redis: Client,
        reader: Reader,
        watermarks: Watermarks,
        metrics: WriteMetrics,
        producer: EventProducer | None = None,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.watermarks = watermarks
        self.metrics = metrics
        self.producer = producer or EventProducer(
            settings.kafka, settings.topic, settings.api_produce_timeout_s, kafka_security.client_kwargs(settings)
        )
        self.auth = WriteAuth(load_tokens(settings.api_write_tokens, settings.api_write_tokens_file))
        self.limiter = RateLimiter(settings.api_write_rate, settings.api_write_burst)
        self.idempotency = Idempotency(redis, settings.api_idempotency_ttl_s, settings.api_idempotency_max_keys)
        self.decoder = Decoder()
        self._redis = redis
        self._start: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._start = asyncio.create_task(self.producer.start())

    async def close(self) -> None:
        if self._start is not None and not self._start.done():
            self._start.cancel()
        await self.producer.close()

    # -- the steps every write takes -----------------------------------------------------------------------

    async def body(self, request: Request) -> bytes:
        limit = self.settings.api_max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, "body_too_large", f"the body is {declared} bytes, at most {limit}")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.settings.api_head_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(408, "request_timeout", "the request body did not arrive in time") from None
        return b"".join(chunks)

    async def produce(self, records: list[tuple[bytes, bytes]], progress: Progress) -> tokens.Marks | Answer:
        """The marks of the acknowledged records, or the 503 to answer; ``progress`` learns what a failure from
        here on must answer (acknowledged: 202 with the token)."""
        started = time.perf_counter()
        progress.fallback = _unknown_outcome()
        try:
            acks = await self.producer.send(records)
        except KafkaUnavailable as exc:
            progress.fallback = None
            self.metrics.produce_failures.labels("not_sent").inc()
            return Answer(503, orjson.dumps({"error": "kafka_unavailable", "message": str(exc), "outcome": "not_sent"}))
        except OutcomeUnknown as exc:
            self.metrics.produce_failures.labels("unknown").inc()
            message = f"{exc}: the events may or may not be in the topic"
            body = {"error": "outcome_unknown", "message": message, "outcome": "unknown"}
            return Answer(503, orjson.dumps(body))
        finally:
            self.metrics.produce_seconds.observe(time.perf_counter() - started)
        self.metrics.accepted.inc(len(acks))
        marks = tokens.merge(acks)
        accepted: ScoreAccepted = {"token": tokens.encode(marks)}
        progress.fallback = Answer(202, orjson.dumps(accepted))
        return marks

    async def run(
        self, request: Request, route: str, answer: Callable[[Writer, bytes, Progress], Awaitable[Answer]]
    ) -> Response:
        writer = self.auth.check(request.headers.get("authorization"))
        body = await self.body(request)
        key = request.headers.get("idempotency-key")
        claim: Claim | None = None
        if key is not None:
            request_print = fingerprint(f"{route}?{request.query_params}", body)
            found = await self.idempotency.begin(writer.scope, key, request_print)
            if isinstance(found, Answer):
                return self._response(found)
            claim = found
        progress = Progress()
        try:
            result = await answer(writer, body, progress)
        except Exception:
            if progress.fallback is None:  # nothing was produced: a 4xx before producing, or Kafka unreachable
                if claim is not None:
                    await self.idempotency.release(claim)
                raise
            log.warning("write produced, then failed: answered %d", progress.fallback.status, exc_info=True)
            result = progress.fallback
        except BaseException:  # cancelled: a produced write keeps its key, with the answer it would have had
            if claim is not None:
                if progress.fallback is None:
                    await self.idempotency.release(claim)
                else:
                    await self.idempotency.finish(claim, progress.fallback)
            raise
        if claim is not None:
            if result.status == 503 and b'"not_sent"' in result.body:
                await self.idempotency.release(claim)
            else:
                await self.idempotency.finish(claim, result)
        return self._response(result)

    def _response(self, answer: Answer) -> Response:
        headers = {"Retry-After": str(self.settings.api_retry_after_s)} if answer.status == 503 else None
        return Response(answer.body, status_code=answer.status, media_type=JSON, headers=headers)

    # -- POST /v1/events -----------------------------------------------------------------------------------

    async def judged(self, parsed: write_bodies.Parsed) -> write_bodies.Parsed:
        """``parsed`` judged against its boards' definitions, read through the reader's cache; an event refused
        on a cached one is refused only on a fresh read (a board declared within the cache's TTL reads as the
        default until then). The worker stays the last judge: a definition may change before it folds, and
        with Redis unreachable the events go out judged by the codec alone (writes need only Kafka)."""
        try:
            found = await self.reader.definitions.lookup(parsed.boards())
            judged = write_bodies.judge(parsed, found)
            refused = {parsed.fields[r["index"]][0] for r in judged.rejected if r["index"] in parsed.fields}
            if not refused:
                return judged
            found.update(await self.reader.definitions.lookup(refused, fresh=True))
        except REDIS_FAILURES as exc:
            log.warning("definitions unreadable (%s): events judged by the codec alone", type(exc).__name__)
            return parsed
        return write_bodies.judge(parsed, found)

    async def events(self, request: Request, writer: Writer, body: bytes, progress: Progress) -> Answer:
        parsed = write_bodies.parse_events(body, request.headers.get("content-type"), self.decoder)
        parsed = await self.judged(parsed)
        for rejection in parsed.rejected:
            self.metrics.rejected.labels(rejection["reason"]).inc()
        self.limiter.take(writer.scope, len(parsed.records))
        marks: tokens.Marks = {}
        if parsed.records:
            produced = await self.produce([(key, value) for _, key, value in parsed.records], progress)
            if isinstance(produced, Answer):
                return produced
            marks = produced
        answer: WriteAnswer = {
            "accepted": len(parsed.records),
            "rejected": parsed.rejected,
            "token": tokens.encode(marks),
        }
        return Answer(200, orjson.dumps(answer))

    # -- POST /v1/boards/{board}/players/{player}/scores ---------------------------------------------------

    async def judged_score(self, board: str, value: bytes) -> None:
        """Raises the 4xx of an event ``board``'s definition refuses, as :meth:`judged` (a fresh read before a
        refusal; the codec alone with Redis unreachable, where a wait answers 503 anyway)."""
        try:
            try:
                write_bodies.judge_score(value, (await self.reader.definitions.lookup([board]))[board])
            except ApiError:  # refused on a cached definition: refused only on a fresh read of it
                write_bodies.judge_score(value, (await self.reader.definitions.lookup([board], fresh=True))[board])
        except REDIS_FAILURES as exc:
            log.warning("definition of %s unreadable (%s): judged by the codec alone", board, type(exc).__name__)

    async def score(self, request: Request, writer: Writer, body: bytes, progress: Progress) -> Answer:
        board, name = check_board(request.path_params["board"]), check_player(request.path_params["player"])
        query = request.query_params
        wait = wait_param(query)
        wait_ms = wait_ms_param(query, self.settings.api_wait_ms, self.settings.api_max_wait_ms)
        now_ms = self.reader.clock()
        value = write_bodies.score_event(board, name, body, request.headers.get("content-type"), now_ms)
        await self.judged_score(board, value)
        self.limiter.take(writer.scope, 1)
        # read before the event exists, so not covering it (a period board's name needs its definition: it is
        # read after the produce, where a failure keeps the Idempotency-Key, and such a wait goes without)
        before = await self.watermarks.version(board) if wait else None
        produced = await self.produce([(name.encode(), value)], progress)
        if isinstance(produced, Answer):
            return produced
        token = tokens.encode(produced)
        accepted: ScoreAccepted = {"token": token}
        if not wait:
            return Answer(202, orjson.dumps(accepted))
        ranked = await self.ranked(board, name, produced, now_ms, wait_ms / 1000, before)
        if isinstance(ranked, str):
            accepted["wait"] = ranked
            return Answer(202, orjson.dumps(accepted))
        ranked["token"] = token
        return Answer(200, orjson.dumps(ranked))

    async def ranked(
        self, board: str, name: str, marks: tokens.Marks, ts_ms: int, timeout_s: float, before: int | None = None
    ) -> ScoreAfterWrite | str:
        """The player from the first snapshot of the board (the event's period board) covering the write, or why
        there is none: ``timeout``, ``dead_lettered``. ``before``: ``board``'s version read before the write."""
        definition = await self.reader.definitions.get(board)
        target = resolve(board, definition, None, ts_ms)  # the period of the event's ts, as the worker routes it
        known = before if target.name == board else None
        coverage = await self.watermarks.wait(target.name, marks, timeout_s, board_only=True, before=known, player=name)
        if coverage is None or coverage.how is Covered.CHECKPOINT:
            outcome = "timeout" if coverage is None else "dead_lettered"
            self.metrics.waits.labels("score", outcome).inc()
            return outcome
        reply = coverage.reply  # read in the snapshot that first showed the write covered
        assert reply is not None, "a player's wait covered by the board carries the player's read"
        header = parse_header(reply, target.name)
        # one step of the board since a version not covering the write: that step is the write's window; more,
        # and which came last is not known (not: known to be another state)
        exact = coverage.before is not None and header.version == coverage.before + 1
        self.metrics.waits.labels("score", "exact" if exact else "covered").inc()
        rank = player(target.name, name, reply)
        answer: ScoreAfterWrite = {**rank, "version": header.version, "exact": exact, "token": ""}
        if target.period is not None:
            answer["board"], answer["period"] = board, target.period.id
        return answer


def _writes(request: Request) -> Writes:
    writes: Writes = request.app.state.writes
    return writes


async def post_events(request: Request) -> Response:
    writes = _writes(request)
    return await writes.run(request, "events", lambda w, body, p: writes.events(request, w, body, p))


async def post_score(request: Request) -> Response:
    writes = _writes(request)
    route = f"scores {request.path_params['board']} {request.path_params['player']}"
    return await writes.run(request, route, lambda w, body, p: writes.score(request, w, body, p))
