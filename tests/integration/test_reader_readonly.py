"""The read API never writes: it runs in full on a Redis ACL user that may only read and run scripts
(``+@read +@scripting -@write``, as deploy/k8s gives it), against boards of every kind a worker wrote through
Kafka on a user of its own. Every answer equals the one an unrestricted user gets, and Redis denied nothing."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis
from redis.exceptions import NoPermissionError

from cli.devstack import LOOPBACK, RedisServer, free_port
from hotboard import keys
from hotboard.boards import BoardDef
from reader_api.app import create_app
from reader_api.settings import ApiSettings
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, declare_boards, wait_for
from tests.integration.reader_harness import api_server, asgi_client
from tests.semantics import random_events

pytestmark = pytest.mark.integration

#: The users of deploy/k8s (deploy/k8s/README.md, "Redis users"): the worker writes hb:* keys, the API only reads them.
WRITER = ["on", ">wpass", "~hb:*", "+@all"]
READER = ["on", ">rpass", "~hb:*", "+@read", "+@scripting", "-@write"]
BOARDS = {
    "race": BoardDef("desc", "best", "earliest"),
    "speedrun": BoardDef("asc", "best", "dense"),
    "coins": BoardDef("desc", "incr", "shared"),
    "level": BoardDef("asc", "set", "lexical"),
    "weekly": BoardDef(reset="weekly", keep=4, grace_ms=8 * 86_400_000),
}


def _paths(board: str) -> list[str]:
    base = f"/v1/boards/{board}"
    return [
        base,
        f"{base}/top",
        f"{base}/top?offset=2&limit=3",
        f"{base}/players/p1",
        f"{base}/players/p1/around",
        f"{base}/players/p1/around?radius=2",
        f"{base}/players?ids=p1,p2,p3,nobody",
        f"{base}/players/nobody",
        f"{base}/top?period=previous",
    ]


def test_the_api_works_in_full_on_a_read_only_user(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn, tmp_path: Path
) -> None:
    admin = redis.Redis(port=redis_server.port)
    admin.execute_command("ACL", "SETUSER", "writer", *WRITER)  # type: ignore[no-untyped-call]
    admin.execute_command("ACL", "SETUSER", "reader", *READER)  # type: ignore[no-untyped-call]
    writer_url = f"redis://writer:wpass@{LOOPBACK}:{redis_server.port}/0"
    reader_url = f"redis://reader:rpass@{LOOPBACK}:{redis_server.port}/0"
    with pytest.raises(NoPermissionError):  # the ACL is real: this user cannot write
        redis.Redis.from_url(reader_url).zadd(keys.board_key("coins"), {"x": 1})

    declare_boards(writer_url, BOARDS)
    rng, now_ms = random.Random(3), int(time.time() * 1000)
    stream = [
        (e.player.encode(), e.value(board, definition))
        for board, definition in BOARDS.items()
        for e in random_events(rng, definition, 400, players=40, mixed=board == "coins")
    ]
    stream += [
        (b"p1", b'{"board": "weekly", "player": "p%d", "delta": 3, "ts": %d}' % (i % 9, now_ms)) for i in range(60)
    ]
    topic = topic_factory(1)
    spawn(writer_url, topic)
    Feeder(kafka, topic, stream, rate=0).finish()
    last = str(len(stream) - 1).encode()
    wait_for(lambda: admin.hget(keys.checkpoint_key(topic), "0") == last, timeout_s=60, what="every event flushed")
    admin.execute_command("ACL", "LOG", "RESET")  # type: ignore[no-untyped-call]

    async def compare() -> int:
        asked = 0
        async with (
            asgi_client(create_app(ApiSettings(redis=reader_url))) as reader,
            asgi_client(create_app(ApiSettings(redis=f"redis://{LOOPBACK}:{redis_server.port}/0"))) as full,
        ):
            listing = await reader.get("/v1/boards?limit=2")
            assert listing.status_code == 200, listing.text
            after = listing.json()["next"]
            paths = [
                "/readyz",
                "/v1/boards",
                "/v1/boards?limit=2",
                f"/v1/boards?limit=2&after={after}",
                "/v1/boards/weekly/periods",
                "/v1/boards/weekly/top?period=current",
            ]
            for path in [*paths, *(p for b in BOARDS for p in _paths(b))]:
                mine, theirs = await reader.get(path), await full.get(path)
                assert mine.status_code < 500, (path, mine.text)
                assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json()), path
                asked += 1
            top = await reader.get("/v1/boards/weekly/top")
            assert top.status_code == 200 and top.json()["total"] == 9  # the current week's period board
        return asked

    assert asyncio.run(compare()) > 40
    with api_server(reader_url, tmp_path) as server:  # the real process: startup, pool, fast path
        for path in ("/readyz", "/v1/boards/coins/top", "/v1/boards/race/players/p1", "/v1/boards/weekly/periods"):
            assert httpx.get(server.url + path, timeout=5).status_code == 200, path
    denied = admin.execute_command("ACL", "LOG")  # type: ignore[no-untyped-call]
    assert denied == [], denied  # no command of the API was refused, not even one it could do without


COMPOSE_SECRETS = Path(__file__).resolve().parents[2] / "deploy" / "compose" / "secrets"


class _AclRedis(RedisServer):
    """redis-server reading its users from the compose stack's ACL file, as the compose ``redis`` service does."""

    def command(self) -> list[str]:
        return [*super().command(), "--aclfile", str(COMPOSE_SECRETS / "redis-users.acl")]


def _compose_url(name: str, port: int) -> str:
    return (COMPOSE_SECRETS / name).read_text().strip().replace("@redis:6379/", f"@{LOOPBACK}:{port}/")


def test_the_compose_redis_users_are_the_ones_tested_here(tmp_path: Path) -> None:
    """The compose stack's users, loaded by a real redis-server from its ACL file: the worker's and the API's
    rules are the ones the test above runs a worker and the API on, each URL secret logs in as its user, and the
    unauthenticated default user may PING (the healthcheck) and nothing else."""
    users = {
        line.split()[1]: line.split()[2:] for line in (COMPOSE_SECRETS / "redis-users.acl").read_text().splitlines()
    }
    no_password = {name: [r for r in rules if not r.startswith(">")] for name, rules in users.items()}
    assert no_password["hotboard-worker"] == [r for r in WRITER if not r.startswith(">")]
    assert no_password["hotboard-api"] == [r for r in READER if not r.startswith(">")]
    server = _AclRedis(free_port(), tmp_path)
    server.start()
    try:
        writer = redis.Redis.from_url(_compose_url("redis-worker-url", server.port))
        reader = redis.Redis.from_url(_compose_url("redis-api-url", server.port))
        anonymous = redis.Redis(port=server.port)
        assert writer.acl_whoami() == "hotboard-worker"  # (the reader may not even ask who it is)
        writer.zadd(keys.board_key("g"), {"a": 1})
        with pytest.raises(NoPermissionError):
            writer.set("not-ours", 1)  # only hb:* keys
        assert reader.zscore(keys.board_key("g"), "a") == 1
        assert reader.eval("return redis.call('ZCARD', KEYS[1])", 1, keys.board_key("g")) == 1
        with pytest.raises(NoPermissionError):
            reader.zadd(keys.board_key("g"), {"b": 2})
        assert anonymous.ping() is True
        with pytest.raises(NoPermissionError):
            anonymous.zscore(keys.board_key("g"), "a")
        for client in (writer, reader, anonymous):
            client.close()
    finally:
        server.stop()
