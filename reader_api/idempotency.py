"""``Idempotency-Key``: a retried write answers as the first did and produces nothing more.

The first request with a key claims it in Redis (``SET NX`` with the TTL: every API process sees the claim),
produces, and stores its answer under the key; a retry finds the answer and gets it back unchanged. A retry
while the first still runs gets 409. A claim whose request died before answering (the process was killed)
answers what it would have: 503, outcome unknown, for the rest of the TTL; a new key is a new write. A
write that produced nothing (Kafka unreachable before any record was handed over) releases its claim, so
its retry is a first try. The key is bound to the request: the same key with another body or route is a 422.

Kept bounded: in Redis by the TTL (and the writer's rate limit), in memory by an LRU of answers in front of
Redis (a retry storm costs no round trip).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from hotboard import keys
from hotboard.redis_client import Client
from reader_api.errors import ApiError

MAX_KEY_CHARS = 255
#: A claim older than this without an answer belongs to a request that died: its outcome is unknown.
PENDING_GRACE_S = 120.0
_PENDING = b"pending "


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Claim:
    key: str
    fingerprint: str


def fingerprint(route: str, body: bytes) -> str:
    return hashlib.sha256(route.encode() + b"\n" + body).hexdigest()


def check_key(raw: str) -> str:
    if not 0 < len(raw) <= MAX_KEY_CHARS or not raw.isascii() or not raw.isprintable():
        raise ApiError(
            422, "invalid_idempotency_key", f"Idempotency-Key must be 1-{MAX_KEY_CHARS} printable ASCII characters"
        )
    return raw


def _unknown() -> Answer:
    message = "the first request with this key did not finish: its events may or may not be in the topic"
    body = {"error": "outcome_unknown", "message": message, "outcome": "unknown"}
    return Answer(503, orjson.dumps(body))


class Idempotency:
    def __init__(self, redis: Client, ttl_s: int, max_in_memory: int, clock: Callable[[], float] = time.time) -> None:
        self._redis = redis
        self.ttl_s = ttl_s
        self._max = max_in_memory
        self._clock = clock
        self._memory: OrderedDict[str, tuple[float, str, Answer]] = OrderedDict()

    async def begin(self, scope: str, raw_key: str, print_: str) -> Claim | Answer:
        """A claim to go ahead with, or the answer to repeat."""
        key = keys.idempotency_key(scope, hashlib.sha256(check_key(raw_key).encode()).hexdigest())
        remembered = self._memory.get(key)
        if remembered is not None and remembered[0] > self._clock():
            self._memory.move_to_end(key)
            return self._same(remembered[1], print_, remembered[2])
        pending = _PENDING + f"{print_} {self._clock():.3f}".encode()
        if await self._redis.set(key, pending, nx=True, ex=self.ttl_s):
            return Claim(key, print_)
        stored = await self._get(key)
        if not stored:  # expired in between: claim again, once
            if await self._redis.set(key, pending, nx=True, ex=self.ttl_s):
                return Claim(key, print_)
            stored = await self._get(key) or _PENDING + f"{print_} {self._clock():.3f}".encode()
        if stored.startswith(_PENDING):
            theirs, _, started = stored[len(_PENDING) :].decode().partition(" ")
            if self._clock() - float(started or 0) > PENDING_GRACE_S:
                return self._same(theirs, print_, _unknown())
            if theirs != print_:
                raise self._reused()
            message = "a request with this Idempotency-Key is still running"
            raise ApiError(409, "in_flight", message, headers={"Retry-After": "1"})
        saved = orjson.loads(stored)
        return self._same(saved["fingerprint"], print_, Answer(int(saved["status"]), saved["body"].encode()))

    async def _get(self, key: str) -> bytes:
        raw = await self._redis.get(key)
        return raw.encode() if isinstance(raw, str) else (raw or b"")

    async def finish(self, claim: Claim, answer: Answer) -> None:
        saved = {"fingerprint": claim.fingerprint, "status": answer.status, "body": answer.body.decode()}
        await self._redis.set(claim.key, orjson.dumps(saved), xx=True, keepttl=True)
        self._remember(claim.key, claim.fingerprint, answer)

    async def release(self, claim: Claim) -> None:
        """Nothing was produced: the key is free for the retry."""
        await self._redis.delete(claim.key)

    def _remember(self, key: str, print_: str, answer: Answer) -> None:
        if self._max <= 0:
            return
        self._memory[key] = (self._clock() + self.ttl_s, print_, answer)
        self._memory.move_to_end(key)
        while len(self._memory) > self._max:
            self._memory.popitem(last=False)

    def _same(self, stored: str, print_: str, answer: Answer) -> Answer:
        if stored != print_:
            raise self._reused()
        return answer

    @staticmethod
    def _reused() -> ApiError:
        return ApiError(422, "idempotency_key_reused", "this Idempotency-Key was used for another request")
