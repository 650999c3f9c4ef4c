"""``Idempotency-Key`` kept bounded (reader_api/idempotency.py): the answers held in memory are an LRU of at most
``api_idempotency_max_keys``, and every key in Redis carries the TTL (24 h by default) from its claim on, its
answer too. Against an in-memory Redis that records each command's expiry."""

from __future__ import annotations

from typing import Any

from reader_api.idempotency import Answer, Claim, Idempotency
from reader_api.write_settings import WriteSettings

DAY_S = 24 * 3600


class ExpiringRedis:
    """GET, SET (NX, XX, EX, KEEPTTL) and DEL over a dict, with each key's expiry on a clock the test moves."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.values: dict[str, tuple[bytes, float | None]] = {}  # key -> (value, expires at)
        self.commands = 0

    def _live(self, key: str) -> tuple[bytes, float | None] | None:
        found = self.values.get(key)
        if found is not None and found[1] is not None and found[1] <= self.clock[0]:
            del self.values[key]
            return None
        return found

    async def get(self, key: str) -> bytes | None:
        self.commands += 1
        found = self._live(key)
        return None if found is None else found[0]

    async def set(self, key: str, value: bytes, **kw: Any) -> bool | None:
        self.commands += 1
        found = self._live(key)
        if (kw.get("nx") and found is not None) or (kw.get("xx") and found is None):
            return None
        if kw.get("keepttl"):
            expires = None if found is None else found[1]
        else:
            expires = None if kw.get("ex") is None else self.clock[0] + kw["ex"]
        self.values[key] = (value, expires)
        return True

    async def delete(self, key: str) -> int:
        self.commands += 1
        return 1 if self.values.pop(key, None) is not None else 0

    def ttl(self, key: str) -> float | None:
        found = self._live(key)
        assert found is not None, key
        return None if found[1] is None else found[1] - self.clock[0]


def _idempotency(max_in_memory: int) -> tuple[Idempotency, ExpiringRedis, list[float]]:
    clock = [1_000_000.0]
    redis = ExpiringRedis(clock)
    ttl_s = WriteSettings.model_fields["api_idempotency_ttl_s"].default
    return Idempotency(redis, ttl_s, max_in_memory, clock=lambda: clock[0]), redis, clock  # type: ignore[arg-type]


async def _write(idempotency: Idempotency, key: str) -> Answer:
    claim = await idempotency.begin("writer", key, "print")
    assert isinstance(claim, Claim)
    answer = Answer(200, f'{{"key": "{key}"}}'.encode())
    await idempotency.finish(claim, answer)
    return answer


async def test_the_answers_in_memory_are_an_lru_bounded_by_max_keys() -> None:
    idempotency, redis, _ = _idempotency(max_in_memory=3)
    answers = {f"k{i}": await _write(idempotency, f"k{i}") for i in range(10)}
    assert len(idempotency._memory) == 3  # k7, k8, k9
    before = redis.commands
    assert await idempotency.begin("writer", "k7", "print") == answers["k7"]  # held: no round trip
    assert redis.commands == before
    answers["k10"] = await _write(idempotency, "k10")  # evicts the least recently used: k8, not k7
    assert len(idempotency._memory) == 3
    before = redis.commands
    assert await idempotency.begin("writer", "k7", "print") == answers["k7"]
    assert redis.commands == before
    for evicted in ("k0", "k8"):  # forgotten in memory, still answered from Redis
        assert await idempotency.begin("writer", evicted, "print") == answers[evicted]
    assert redis.commands > before
    assert len(idempotency._memory) == 3  # a retry answered from Redis adds nothing to memory
    nothing, _, _ = _idempotency(max_in_memory=0)
    await _write(nothing, "k")
    assert not nothing._memory


async def test_every_key_in_redis_carries_the_ttl_of_at_least_a_day_and_its_answer_keeps_it() -> None:
    idempotency, redis, clock = _idempotency(max_in_memory=0)
    assert idempotency.ttl_s >= DAY_S
    claim = await idempotency.begin("writer", "k", "print")
    assert isinstance(claim, Claim) and redis.ttl(claim.key) == idempotency.ttl_s  # the claim itself
    clock[0] += 3600
    await idempotency.finish(claim, Answer(202, b'{"token": ""}'))
    assert redis.ttl(claim.key) == idempotency.ttl_s - 3600  # the answer keeps the claim's expiry, never renews it
    assert all(redis.ttl(key) is not None for key in redis.values)
    clock[0] += idempotency.ttl_s
    assert redis._live(claim.key) is None  # gone after the TTL: a new write
    again = await idempotency.begin("writer", "k", "print")
    assert isinstance(again, Claim) and redis.ttl(again.key) == idempotency.ttl_s
