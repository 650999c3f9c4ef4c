"""The one bounded cache: least recently used out first, ``in`` does not count as a use, and a TTL on top."""

from __future__ import annotations

import pytest

from hotboard.bounded import BoundedCache, TtlCache

#: (max entries, steps, keys left least recent first). A step: ("put", key) or ("get", key) or ("in", key).
CASES = [
    (2, [("put", "a"), ("put", "b"), ("put", "c")], ["b", "c"]),
    (2, [("put", "a"), ("put", "b"), ("get", "a"), ("put", "c")], ["a", "c"]),
    (2, [("put", "a"), ("put", "b"), ("in", "a"), ("put", "c")], ["b", "c"]),
    (2, [("put", "a"), ("put", "b"), ("put", "a"), ("put", "c")], ["a", "c"]),
    (2, [("put", "a"), ("get", "x"), ("put", "b")], ["a", "b"]),
    (1, [("put", "a"), ("put", "b")], ["b"]),
    (0, [("put", "a")], []),
    (3, [("put", "a"), ("put", "b"), ("get", "a"), ("get", "b"), ("put", "c"), ("put", "d")], ["b", "c", "d"]),
]


@pytest.mark.parametrize(("max_entries", "steps", "left"), CASES)
def test_least_recently_used_goes_first(max_entries: int, steps: list[tuple[str, str]], left: list[str]) -> None:
    cache: BoundedCache[str, int] = BoundedCache(max_entries)
    for n, (step, key) in enumerate(steps):
        if step == "put":
            cache.put(key, n)
        elif step == "get":
            cache.get(key)
        else:
            _ = key in cache
    assert list(cache) == left
    assert len(cache) == len(left) <= max_entries


def test_get_answers_the_value_put_and_none_when_absent() -> None:
    cache: BoundedCache[str, str] = BoundedCache(4)
    cache.put("a", "x")
    cache.put("a", "y")
    assert (cache.get("a"), cache.get("b"), "a" in cache, "b" in cache) == ("y", None, True, False)
    cache.clear()
    assert (len(cache), cache.get("a")) == (0, None)


def test_ttl_values_expire_on_the_injected_clock_and_stay_bounded() -> None:
    now = [100.0]
    cache: TtlCache[str, int] = TtlCache(5.0, 2, lambda: now[0])
    cache.put("a", 1)
    now[0] = 104.9
    assert cache.get("a") == 1
    now[0] = 105.0
    assert cache.get("a") is None, "kept ttl_s, not longer"
    cache.put("a", 2)
    cache.put("b", 3)
    cache.put("c", 4)
    assert (len(cache), cache.get("a"), cache.get("c")) == (2, None, 4)


def test_discard_forgets_one_key_and_ignores_an_absent_one() -> None:
    cache: BoundedCache[str, int] = BoundedCache(4)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.discard("a")
    cache.discard("never")
    assert cache.get("a") is None and cache.get("b") == 2 and len(cache) == 1
