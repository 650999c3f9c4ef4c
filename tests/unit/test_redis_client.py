"""Seed lists of ``--redis-cluster``: every form the URL may take, and the refusals."""

from __future__ import annotations

import pytest

from hotboard.redis_client import split_seeds


@pytest.mark.parametrize(
    ("url", "first", "seeds"),
    [
        ("redis://h1:7000", "redis://h1:7000", [("h1", 7000)]),
        ("redis://h1:7000/0", "redis://h1:7000", [("h1", 7000)]),
        ("redis://h1:7000,h2:7001", "redis://h1:7000", [("h1", 7000), ("h2", 7001)]),
        ("redis://h1:7000, h2:7001 ,h3", "redis://h1:7000", [("h1", 7000), ("h2", 7001), ("h3", 6379)]),
        ("redis://h1", "redis://h1:6379", [("h1", 6379)]),
        ("rediss://u:p@h1:1,h2:2?ssl_ca_certs=ca", "rediss://u:p@h1:1?ssl_ca_certs=ca", [("h1", 1), ("h2", 2)]),
        ("redis://[::1]:7000,[::1]:7001", "redis://[::1]:7000", [("::1", 7000), ("::1", 7001)]),
    ],
)
def test_a_seed_list_names_every_node_and_keeps_user_and_options(
    url: str, first: str, seeds: list[tuple[str, int]]
) -> None:
    assert split_seeds(url) == (first, seeds)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://h1:7000/1", "one database"),
        ("redis://h1:7000,,h2:7001", "is not host:port"),
        ("redis://h1:70x0", "is not host:port"),
        ("redis://:7000", "is not host:port"),
    ],
)
def test_a_bad_seed_list_is_refused(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        split_seeds(url)
