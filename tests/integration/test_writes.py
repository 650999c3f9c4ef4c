"""Writes over HTTP against the real broker, a real redis-server and an in-process worker: events in through
``POST``, folded by the worker, read back through ``?wait=true`` and ``?after=``; invalid items, auth, rate
limits, idempotent retries (records counted on the topic) and a broker that stops answering."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from cli.devstack import KafkaBroker, create_topic
from cli.process import free_port
from hotboard import board_removal, board_store, keys
from hotboard.boards import BoardDef
from reader_api import tokens
from reader_api import waits as waits_module
from reader_api.answers import ScoreAccepted, ScoreAfterWrite, TopPage, WriteAnswer
from reader_api.app import create_app
from reader_api.errors import ApiError
from reader_api.settings import ApiSettings
from reader_api.waits import Watermarks
from tests.integration.harness import read_topic
from tests.integration.reader_harness import (
    api_server,
    asgi_client,
    conforms,
    metrics_text,
    reference_ranking,
    running_worker,
)

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    return topic_factory(partitions=4)


def api(redis_url: str, kafka: str, topic: str, **kw: Any) -> ApiSettings:
    base: dict[str, Any] = {"redis": redis_url, "kafka": kafka, "topic": topic, "api_write_tokens": TOKEN}
    return ApiSettings(**{**base, **kw})


async def count_records(kafka: str, topic: str, at_least: int) -> int:
    """Records on the topic: read until ``at_least`` arrived, then one record more is waited for (briefly), so a
    duplicate would be counted."""
    return len(await read_topic(kafka, topic, at_least + 1, timeout_s=4.0))


async def test_events_are_validated_by_the_codec_produced_and_folded(kafka: str, topic: str, redis_url: str) -> None:
    events: list[Any] = [
        {"board": "w", "player": "alice", "delta": 10},
        {"board": "w", "player": "bob", "delta": "7"},  # bad_type
        {"board": "w", "player": "carol", "delta": 3, "meta": {"name": "C"}},
        {"board": "w", "delta": 1},  # missing_field
        {"board": "w", "player": "alice", "delta": 5},
        "not an object",  # not_object
        {"board": "w", "player": "dave", "op": "mul", "delta": 2},  # unsupported_op
    ]
    async with running_worker(kafka, redis_url, topic), asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        r = await c.post("/v1/events", json=events, headers=AUTH)
        assert r.status_code == 200, r.text
        body: WriteAnswer = r.json()
        conforms(body, WriteAnswer)
        assert body["accepted"] == 3
        assert [(x["index"], x["reason"]) for x in body["rejected"]] == [
            (1, "bad_type"),
            (3, "missing_field"),
            (5, "not_object"),
            (6, "unsupported_op"),
        ]
        # read your writes: the first answer already holds every accepted event, nothing of the rejected ones
        top = await c.get("/v1/boards/w/top", params={"after": body["token"], "wait_ms": 20_000})
        assert top.status_code == 200, top.text
        page: TopPage = top.json()
        assert [(e["rank"], e["player"], e["score"]) for e in page["entries"]] == reference_ranking(
            {"alice": 15, "carol": 3}
        )
        assert page["entries"][1]["meta"] == {"name": "C"}
        assert await count_records(kafka, topic, 3) == 3
        ndjson = b'{"board": "w", "player": "erin", "delta": 4}\n\n{"board": "w", "player": "x", "delta": 1.5}\n'
        r = await c.post("/v1/events", content=ndjson, headers={**AUTH, "Content-Type": "application/x-ndjson"})
        assert r.json()["accepted"] == 1 and r.json()["rejected"][0]["index"] == 1
        metrics = metrics_text(c)
        assert 'hotboard_api_events_rejected_total{reason="bad_type"} 2.0' in metrics
        assert "hotboard_api_events_accepted_total 4.0" in metrics


async def test_an_item_its_boards_definition_refuses_is_rejected_and_produces_nothing(
    kafka: str, topic: str, redis_url: str, redis_client: Any
) -> None:
    """The codec accepts ``{"score": 5}`` without an op, but on an incr board the worker would dead-letter it
    (the board's operator takes a delta): the API rejects it, by index and the worker's reason, and produces
    nothing of it; the single-score route answers 422 with the reason. A board declared after the API cached
    it as undeclared is judged by a fresh read, not refused."""
    await board_store.declare(redis_client, "hi", BoardDef("desc", "best"))
    events = [
        {"board": "arena", "player": "c", "score": 5},  # arena is undeclared: incr
        {"board": "arena", "player": "a", "delta": 2},
        {"board": "hi", "player": "b", "delta": 1},  # best takes a score
        {"board": "hi", "player": "b", "score": 9},
    ]
    async with running_worker(kafka, redis_url, topic), asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        r = await c.post("/v1/events", json=events, headers=AUTH)
        assert r.status_code == 200, r.text
        body: WriteAnswer = r.json()
        assert body["accepted"] == 2
        assert [(x["index"], x["reason"], x["detail"]) for x in body["rejected"]] == [
            (0, "missing_field", "delta is required for incr"),
            (2, "missing_field", "score is required for best"),
        ]
        score = await c.post("/v1/boards/arena/players/c/scores", json={"score": 5}, headers=AUTH)
        assert (score.status_code, score.json()["error"]) == (422, "missing_field"), score.text
        assert (await c.get("/v1/boards/late/top")).status_code == 404  # cached: undeclared, the default
        await board_store.declare(redis_client, "late", BoardDef("desc", "best"))
        late = await c.post("/v1/boards/late/players/x/scores", json={"score": 3}, headers=AUTH)
        assert late.status_code == 202, late.text
        for board, token, expected in (("arena", body["token"], {"a": 2}), ("late", late.json()["token"], {"x": 3})):
            top = await c.get(f"/v1/boards/{board}/top", params={"after": token, "wait_ms": 20_000})
            assert top.status_code == 200, top.text
            assert [(e["player"], e["score"]) for e in top.json()["entries"]] == list(expected.items())
        assert 'hotboard_api_events_rejected_total{reason="missing_field"} 2.0' in metrics_text(c)
    assert await count_records(kafka, topic, 3) == 3  # a, b's score and x: nothing of the rejected items


async def test_writes_need_only_kafka_with_redis_unreachable_the_codec_judges(kafka: str, topic: str) -> None:
    """Redis down (nothing listens on its port): the definitions cannot be read, so the events are judged by the
    codec alone and produced (the worker stays the last judge); a write without a wait never needs Redis."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}"
    async with asgi_client(create_app(api(dead, kafka, topic))) as c:
        r = await c.post("/v1/events", json=[{"board": "arena", "player": "a", "delta": 2}], headers=AUTH)
        assert (r.status_code, r.json()["accepted"]) == (200, 1), r.text
        score = await c.post("/v1/boards/arena/players/b/scores", json={"delta": 1}, headers=AUTH)
        assert score.status_code == 202, score.text
    assert await count_records(kafka, topic, 2) == 2


async def test_bodies_that_are_not_event_lists_are_4xx_with_a_message(kafka: str, topic: str, redis_url: str) -> None:
    settings = api(redis_url, kafka, topic, api_max_body_bytes=4096)
    async with asgi_client(create_app(settings)) as c:
        for content, kind, status, code in [
            (b'{"player": "a", "delta": 1}', "application/json", 400, "not_an_array"),
            (b"[1, 2", "application/json", 400, "invalid_json"),
            (b"[]", "text/plain", 415, "unsupported_media_type"),
            (orjson.dumps([{"player": "a", "delta": 1}] * 1001), "application/json", 413, "body_too_large"),
            (b"[" + b",".join([b"{}"] * 1001) + b"]", "application/json", 413, "too_many_events"),
        ]:
            r = await c.post("/v1/events", content=content, headers={**AUTH, "Content-Type": kind})
            assert (r.status_code, r.json()["error"]) == (status, code), content[:40]
            assert r.json()["message"]
        assert await count_records(kafka, topic, 0) == 0


async def test_update_then_rank_answers_the_first_snapshot_holding_the_write(
    kafka: str, topic: str, redis_url: str
) -> None:
    async with running_worker(kafka, redis_url, topic), asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        scores = {"p1": 50, "p2": 30, "p3": 10}
        events = [{"board": "r", "player": p, "delta": s} for p, s in scores.items()]
        r = await c.post("/v1/events", json=events, headers=AUTH)
        ready = await c.get("/v1/boards/r/top", params={"after": r.json()["token"], "wait_ms": 20_000})
        assert ready.status_code == 200
        url = "/v1/boards/r/players/p3/scores"
        r = await c.post(url, params={"wait": "true"}, json={"delta": 25}, headers=AUTH)
        assert r.status_code == 200, r.text
        ranked: ScoreAfterWrite = r.json()
        conforms(ranked, ScoreAfterWrite)
        assert (ranked["score"], ranked["rank"], ranked["total"]) == (35, 2, 3)
        assert ranked["exact"] is True and isinstance(ranked["as_of"], int) and ranked["token"]
        r = await c.post(url, params={"wait": "true"}, json={"delta": 20, "meta": {"n": 3}}, headers=AUTH)
        assert (r.json()["score"], r.json()["rank"], r.json()["meta"]) == (55, 1, {"n": 3})
        # no wait: 202 with the token at once
        r = await c.post(url, json={"delta": 1}, headers=AUTH)
        assert r.status_code == 202
        conforms(r.json(), ScoreAccepted)
        player = await c.get("/v1/boards/r/players/p3", params={"after": r.json()["token"]})
        assert player.json()["score"] == 56
        bad = await c.post(url, json={"delta": 1.5}, headers=AUTH)
        assert (bad.status_code, bad.json()["error"]) == (422, "bad_type")
        assert 'hotboard_api_waits_total{kind="score",outcome="exact"} 2.0' in metrics_text(c)


def watermarks_of(client: httpx.AsyncClient) -> Watermarks:
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    watermarks: Watermarks = transport.app.state.reader.after.watermarks  # type: ignore[attr-defined]
    return watermarks


async def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f}s waiting for {what}"
        await asyncio.sleep(0.01)


async def polled_once(c: httpx.AsyncClient, url: str, delta: int) -> asyncio.Task[httpx.Response]:
    """A ``?wait=true`` write in flight, once the API's poller has looked at its board since it was sent."""
    watermarks = watermarks_of(c)
    polls = watermarks.polls
    query = {"wait": "true", "wait_ms": "30000"}
    pending = asyncio.create_task(c.post(url, params=query, json={"delta": delta}, headers=AUTH))
    await wait_until(lambda: watermarks.polls > polls or pending.done(), "a poll of the board")
    assert not pending.done(), pending.result().text
    return pending


async def test_update_then_rank_on_a_new_or_deleted_board_is_exact_from_its_first_window(
    kafka: str, topic: str, redis_url: str, redis_client: Any
) -> None:
    """The write waits on a board without meta: new, then deleted. The poller sees it so while no worker runs
    (no window can land), then the worker applies the board's first window since. That answer is the state right
    after the window (the version after the one the board reads as: 0, or the delete's, the write alone) and says so."""
    async with asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        url = "/v1/boards/fresh/players/solo/scores"
        for round_no, (delta, version) in enumerate([(7, 1), (5, 3)]):  # the delete's own version: 2
            pending = await polled_once(c, url, delta)
            async with running_worker(kafka, redis_url, topic):
                r = await pending
            assert r.status_code == 200, r.text
            ranked: ScoreAfterWrite = r.json()
            assert (ranked["score"], ranked["rank"], ranked["total"], ranked["version"]) == (delta, 1, 1, version)
            assert ranked["exact"] is True, (round_no, ranked)
            deleted = await board_removal.delete(redis_client, topic, "fresh", tokens.decode(ranked["token"]))
            assert deleted.found and deleted.version == version + 1
        assert 'hotboard_api_waits_total{kind="score",outcome="exact"} 2.0' in metrics_text(c)


async def until_applied(redis: Any, applied_key: str, field: str, offset: int) -> None:
    """Until the watermark ``field`` of a board's applied hash is at ``offset``: the window holding that record
    was applied."""
    deadline = time.monotonic() + 20
    while int(await redis.hget(applied_key, field) or -1) < offset:
        assert time.monotonic() < deadline, f"the window holding {field} {offset} was not applied"
        await asyncio.sleep(0.01)


async def test_update_then_rank_is_exact_when_the_acknowledgement_comes_after_the_window(
    kafka: str, topic: str, redis_url: str, redis_client: Any
) -> None:
    """Kafka acknowledges the write only once the worker applied its window (a slow ack; the worker fetched the
    record first): the API's first poll already sees it covered. Its version is still the one right after the
    version read before the event existed, so the answer is exact and says so."""
    app = create_app(api(redis_url, kafka, topic))
    async with running_worker(kafka, redis_url, topic), asgi_client(app) as c:
        r = await c.post("/v1/events", json=[{"board": "late", "player": "first", "delta": 50}], headers=AUTH)
        seen = await c.get("/v1/boards/late/top", params={"after": r.json()["token"], "wait_ms": 20_000})
        assert seen.status_code == 200, seen.text
        producer = app.state.writes.producer
        send = producer.send

        async def acknowledged_after_the_window(records: Any) -> list[tuple[int, int]]:
            acks: list[tuple[int, int]] = await send(records)
            ((partition, offset),) = acks
            await until_applied(
                redis_client, keys.applied_key("late"), keys.watermark_field(topic, partition, 0), offset
            )
            return acks

        producer.send = acknowledged_after_the_window
        url = "/v1/boards/late/players/second/scores"
        r = await c.post(url, params={"wait": "true"}, json={"delta": 9}, headers=AUTH)
        assert r.status_code == 200, r.text
        ranked: ScoreAfterWrite = r.json()
        assert (ranked["score"], ranked["rank"], ranked["total"], ranked["version"]) == (9, 2, 2, 2)
        assert ranked["exact"] is True, ranked


async def test_a_window_landing_between_two_polls_is_answered_as_a_later_state_not_exact(
    kafka: str, topic: str, redis_url: str, redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The player is read in the poll that first sees the write covered, so only two windows landing between
    two polls make the answer a later state. The test holds the poll until the write's window and another one
    (another player) were applied: the answer is that later state, holding the write, and says ``exact: false``."""
    async with running_worker(kafka, redis_url, topic), asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        r = await c.post("/v1/events", json=[{"board": "gap", "player": "p1", "delta": 50}], headers=AUTH)
        seen = await c.get("/v1/boards/gap/top", params={"after": r.json()["token"], "wait_ms": 20_000})
        assert seen.status_code == 200, seen.text
        poll = waits_module._MARKS
        held = False

        async def two_windows_first(redis: Any, script_keys: Any, args: Any) -> Any:
            nonlocal held
            fields = int(args[0])
            if not held and len(args) > 1 + fields:  # the first poll reading the waiting player
                held = True
                await until_applied(redis_client, script_keys[-1], args[int(args[-2])], int(args[-1]))
                w = await c.post("/v1/events", json=[{"board": "gap", "player": "p3", "delta": 100}], headers=AUTH)
                ((p, o),) = tokens.decode(w.json()["token"]).items()
                await until_applied(redis_client, keys.applied_key("gap"), keys.watermark_field(topic, p, 0), o)
            return await poll(redis, script_keys, args)

        monkeypatch.setattr(waits_module, "_MARKS", two_windows_first)
        url = "/v1/boards/gap/players/p2/scores"
        r = await c.post(url, params={"wait": "true"}, json={"delta": 10}, headers=AUTH)
        assert r.status_code == 200, r.text
        ranked: ScoreAfterWrite = r.json()
        assert (ranked["score"], ranked["rank"], ranked["total"], ranked["version"]) == (10, 3, 3, 3)
        assert ranked["exact"] is False
        assert 'hotboard_api_waits_total{kind="score",outcome="covered"} 1.0' in metrics_text(c)


async def test_a_wait_that_the_worker_does_not_answer_is_bounded(kafka: str, topic: str, redis_url: str) -> None:
    """No worker: ``?wait=true`` answers 202 with the token after ``wait_ms``; ``?after=`` a 503 with Retry-After."""
    async with asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        started = time.monotonic()
        r = await c.post("/v1/boards/q/players/a/scores?wait=true&wait_ms=300", json={"delta": 1}, headers=AUTH)
        assert r.status_code == 202 and r.json()["wait"] == "timeout"
        read = await c.get("/v1/boards/q/top", params={"after": r.json()["token"], "wait_ms": 300})
        assert read.status_code == 503 and read.headers["Retry-After"] and read.json()["error"] == "not_yet_applied"
        assert time.monotonic() - started < 5
        bad = await c.get("/v1/boards/q/top", params={"after": "%%%"})
        assert bad.status_code == 422 and bad.json()["parameter"] == "after"


async def test_writes_need_a_configured_bearer_token_reads_stay_open(kafka: str, topic: str, redis_url: str) -> None:
    async with asgi_client(create_app(api(redis_url, kafka, topic, api_write_tokens=""))) as c:
        r = await c.post("/v1/events", json=[{"player": "a", "delta": 1}], headers=AUTH)
        assert (r.status_code, r.json()["error"]) == (403, "writes_disabled")
        assert (await c.get("/v1/boards/global/top")).status_code == 404  # open: unknown board, not 401
    async with asgi_client(create_app(api(redis_url, kafka, topic, api_write_tokens="other," + TOKEN))) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            r = await c.post("/v1/events", json=[{"player": "a", "delta": 1}], headers=headers)
            assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), headers
        assert (await c.post("/v1/events", json=[], headers={"Authorization": "Bearer other"})).status_code == 200
    assert await count_records(kafka, topic, 0) == 0


async def test_each_token_has_its_rate_limit(kafka: str, topic: str, redis_url: str) -> None:
    settings = api(redis_url, kafka, topic, api_write_rate=0.01, api_write_burst=5, api_write_tokens=f"{TOKEN},b")
    async with asgi_client(create_app(settings)) as c:
        events = [{"player": f"p{i}", "delta": 1} for i in range(3)]
        assert (await c.post("/v1/events", json=events, headers=AUTH)).status_code == 200
        r = await c.post("/v1/events", json=events, headers=AUTH)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        other = await c.post("/v1/events", json=events, headers={"Authorization": "Bearer b"})
        assert other.status_code == 200
    assert await count_records(kafka, topic, 6) == 6


async def test_an_idempotent_retry_answers_as_the_first_and_produces_nothing_more(
    kafka: str, topic: str, redis_url: str
) -> None:
    events = [{"player": f"p{i}", "delta": i} for i in range(5)] + [{"delta": 1}]
    headers = {**AUTH, "Idempotency-Key": "order-1"}
    async with asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        first = await c.post("/v1/events", json=events, headers=headers)
        assert first.status_code == 200 and first.json()["accepted"] == 5
    # another process (a new app: no memory of it) answers the retry from Redis
    async with asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        for _ in range(3):
            again = await c.post("/v1/events", json=events, headers=headers)
            assert (again.status_code, again.content) == (first.status_code, first.content)
        reused = await c.post("/v1/events", json=events[:1], headers=headers)
        assert (reused.status_code, reused.json()["error"]) == (422, "idempotency_key_reused")
        fresh = await c.post("/v1/events", json=events[:1], headers={**AUTH, "Idempotency-Key": "order-2"})
        assert fresh.json()["accepted"] == 1
        # ten at once with one new key: one produces, each other answers its answer or 409 while it runs
        racing = {**AUTH, "Idempotency-Key": "order-3"}
        answers = await asyncio.gather(*(c.post("/v1/events", json=events[:2], headers=racing) for _ in range(10)))
        assert {r.status_code for r in answers} <= {200, 409} and 200 in {r.status_code for r in answers}
        assert all(r.headers["Retry-After"] for r in answers if r.status_code == 409)
    assert await count_records(kafka, topic, 8) == 8


async def test_only_a_write_past_the_rate_limit_leaves_its_key_in_redis_with_the_ttl(
    kafka: str, topic: str, redis_url: str, redis_client: Any
) -> None:
    """The keys a token leaves in Redis are bounded by its rate limit: a request refused (429, or any 4xx
    before producing) gives its claim back, so each key that stays cost at least one event of the bucket, and
    each one expires after the TTL (24 h)."""
    settings = api(redis_url, kafka, topic, api_write_burst=1, api_write_rate=0.001)
    async with asgi_client(create_app(settings)) as c:
        sent = await c.post("/v1/events", json=[{"player": "a", "delta": 1}], headers={**AUTH, "Idempotency-Key": "a"})
        assert sent.status_code == 200, sent.text
        for key in ("b", "c"):
            refused = await c.post(
                "/v1/events", json=[{"player": key, "delta": 1}], headers={**AUTH, "Idempotency-Key": key}
            )
            assert refused.status_code == 429, refused.text
        invalid = await c.post(
            "/v1/boards/g/players/x/scores", json={"score": 1}, headers={**AUTH, "Idempotency-Key": "d"}
        )
        assert (invalid.status_code, invalid.json()["error"]) == (422, "missing_field")
    kept = [k async for k in redis_client.scan_iter(match=f"{keys.PREFIX}:idem:*")]
    assert len(kept) == 1
    assert 86_400 - 60 <= await redis_client.ttl(kept[0]) <= 86_400


async def test_a_broker_that_stops_answering_is_a_bounded_503(tmp_path: Path, redis_url: str) -> None:
    broker = KafkaBroker(free_port(), tmp_path)
    broker.start()
    try:
        await create_topic(broker.bootstrap, "stalled", 2)
        settings = api(redis_url, broker.bootstrap, "stalled", api_produce_timeout_s=2.0)
        async with asgi_client(create_app(settings)) as c:
            assert (await c.post("/v1/events", json=[{"player": "a", "delta": 1}], headers=AUTH)).status_code == 200
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                headers = {**AUTH, "Idempotency-Key": "k"}
                r = await c.post("/v1/events", json=[{"player": "b", "delta": 1}], headers=headers)
                took = time.monotonic() - started
                assert r.status_code == 503 and r.json()["outcome"] in {"unknown", "not_sent"}, r.text
                assert took < 4.0 and r.headers["Retry-After"]
            finally:
                broker.proc.send_signal(signal.SIGCONT)
    finally:
        broker.stop()


async def test_a_broker_that_never_answers_at_start_is_a_bounded_503_nothing_sent(redis_url: str, topic: str) -> None:
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        settings = api(redis_url, f"127.0.0.1:{port}", topic, api_produce_timeout_s=1.5)
        async with asgi_client(create_app(settings)) as c:
            started = time.monotonic()
            r = await c.post("/v1/events", json=[{"player": "a", "delta": 1}], headers=AUTH)
            assert (r.status_code, r.json()["outcome"]) == (503, "not_sent")
            assert time.monotonic() - started < 3.5
            assert (await c.get("/readyz")).status_code == 200  # reads go on
    finally:
        silent.close()


async def test_without_kafka_the_write_endpoints_are_not_served(redis_url: str) -> None:
    async with asgi_client(create_app(ApiSettings(redis=redis_url))) as c:
        assert (await c.post("/v1/events", json=[], headers=AUTH)).status_code in {404, 405}
        assert "/v1/events" not in (await c.get("/openapi.json")).json()["paths"]


def test_hotboard_api_with_kafka_serves_the_writes_over_its_bounded_server(
    kafka: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    """The real process: ``--kafka`` turns the writes on, bodies go through the bounded httptools protocol."""
    env = {"HOTBOARD_API_WRITE_TOKENS": TOKEN, "HOTBOARD_API_MAX_BODY_BYTES": "50000"}
    with api_server(redis_url, tmp_path, "--kafka", kafka, "--topic", topic, env=env) as server:
        lines = b"".join(orjson.dumps({"player": f"p{i}", "delta": 1}) + b"\n" for i in range(1000))
        ndjson = {**AUTH, "Content-Type": "application/x-ndjson"}
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.post("/v1/events", content=lines, headers=ndjson)
            assert r.status_code == 200 and r.json()["accepted"] == 1000, r.text
            assert r.headers["x-content-type-options"] == "nosniff"
            big = c.post("/v1/events", content=lines * 3, headers=ndjson)
            assert (big.status_code, big.json()["error"]) == (413, "body_too_large")
            assert c.get("/openapi.json").json()["info"]["title"] == "hotboard API"
            assert c.get("/v1/boards/global/top").status_code == 404  # reads as before
    assert asyncio.run(count_records(kafka, topic, 1000)) == 1000


async def test_many_waiters_on_one_board_share_one_poller(kafka: str, topic: str, redis_url: str) -> None:
    """50 reads wait on one board for 400 ms: Redis is polled once per poll interval, not once per request."""
    settings = api(redis_url, kafka, topic, api_wait_poll_ms=20)
    async with asgi_client(create_app(settings)) as c:
        reads = [c.get("/v1/boards/shared/top", params={"after": "0.99", "wait_ms": 400}) for _ in range(50)]
        answers = await asyncio.gather(*reads)
        assert {r.status_code for r in answers} == {503}
        transport = c._transport
        assert isinstance(transport, httpx.ASGITransport)
        polls = transport.app.state.reader.after.watermarks.polls  # type: ignore[attr-defined]
        assert 5 <= polls <= 40, polls  # 400 ms / 20 ms, with slack for a slow machine; 50 per tick if per request


async def test_a_failure_after_the_produce_keeps_the_idempotency_key(
    kafka: str, topic: str, redis_url: str, redis_client: Any
) -> None:
    """Once Kafka acknowledged the write, neither an error in ``?wait=true`` (a board whose stored definition
    became unreadable after the write was checked) nor the request being cancelled (a client that gave up, a
    shutting-down server) frees its Idempotency-Key: each retry answers, none produces a second time."""
    async with asgi_client(create_app(api(redis_url, kafka, topic))) as c:
        assert isinstance(c._transport, httpx.ASGITransport)
        definitions = c._transport.app.state.reader.definitions  # type: ignore[attr-defined]

        readable = definitions.get

        async def unreadable(board: str) -> BoardDef:  # the wait's read, after the produce
            if board == "broken":
                raise ApiError(503, "corrupt_data", f"{board}: not a hash")
            return await readable(board)  # type: ignore[no-any-return]

        definitions.get = unreadable
        url = "/v1/boards/broken/players/a/scores"
        headers = {**AUTH, "Idempotency-Key": "after-produce"}
        first = await c.post(url, params={"wait": "true"}, json={"delta": 1}, headers=headers)
        again = await c.post(url, params={"wait": "true"}, json={"delta": 1}, headers=headers)
        # no worker: the wait lasts; the request is cancelled while it waits, after its event was produced
        url = "/v1/boards/quiet/players/b/scores"
        headers = {**AUTH, "Idempotency-Key": "cancelled"}
        query = {"wait": "true", "wait_ms": "10000"}
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(c.post(url, params=query, json={"delta": 1}, headers=headers), 1.5)
        retry = await c.post(url, params=query, json={"delta": 1}, headers=headers)
    assert await count_records(kafka, topic, 2) == 2  # one per key
    # the write was acknowledged: accepted with its token (an error would invite a retry without the key)
    assert first.status_code == 202 and first.json()["token"], first.text
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert retry.status_code == 202 and retry.json()["token"], retry.text


async def test_a_write_goes_out_in_batches_keyed_by_player_and_its_token_names_each_partitions_last_record(
    kafka: str, topic: str, redis_url: str
) -> None:
    """Three writes of 1,000 events (enough to fill batches): every record on the partition murmur2 of its
    player gives (what ``send()`` and every librdkafka client pick), each player's events in the order sent, and
    each token's marks the offsets of that write's last record per partition."""
    partitioner = DefaultPartitioner()
    sent: list[dict[str, Any]] = []
    marks: dict[int, int] = {}
    settings = api(redis_url, kafka, topic, api_write_burst=10_000)
    async with asgi_client(create_app(settings)) as c:
        for round_no in range(3):
            pad = {"pad": "x" * 60}
            events = [{"player": f"p{i % 97}", "delta": round_no * 1000 + i, "meta": pad} for i in range(1000)]
            r = await c.post("/v1/events", json=events, headers=AUTH)
            assert r.status_code == 200 and r.json()["accepted"] == 1000, r.text
            token = tokens.decode(r.json()["token"])
            assert all(token[p] > marks.get(p, -1) for p in token)
            marks.update(token)
            sent += events
    records = await read_topic(kafka, topic, len(sent))
    assert len(records) == len(sent)
    partitions = sorted({r.partition for r in records} | set(range(4)))
    last = {p: max(r.offset for r in records if r.partition == p) for p in {r.partition for r in records}}
    assert marks == last
    for record in records:
        assert record.partition == partitioner(record.key, partitions, partitions)
    by_player: dict[str, list[int]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None and record.value is not None
        by_player.setdefault(record.key.decode(), []).append(orjson.loads(record.value)["delta"])
    assert by_player == {
        name: [e["delta"] for e in sent if e["player"] == name] for name in {e["player"] for e in sent}
    }
