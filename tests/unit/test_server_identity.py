"""The server identity a worker checks on every new connection: the first server is known, another one is
refused until the worker accepts it (after resynchronising from it)."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from flusher.server import ServerIdentity, ServerRestarted, parse_run_id

INFO = b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6379\r\n"


def test_run_id_is_read_from_info_server() -> None:
    assert parse_run_id(INFO) == "abc123"
    assert parse_run_id(INFO.decode()) == "abc123"


def test_info_without_run_id_is_an_error_reply() -> None:
    with pytest.raises(ResponseError, match="run_id"):
        parse_run_id(b"# Server\r\nredis_version:7.0.15\r\n")


def test_another_server_is_refused_until_accepted() -> None:
    identity = ServerIdentity()
    identity.seen("a")
    identity.seen("a")
    assert identity.known == "a" and identity.restarted_as is None
    for _ in range(2):  # every new connection to it, until the worker has resynchronised
        with pytest.raises(ServerRestarted):
            identity.seen("b")
    assert identity.known == "a" and identity.restarted_as == "b"
    identity.accept()
    identity.seen("b")
    assert identity.known == "b" and identity.restarted_as is None


def test_accept_without_a_restart_changes_nothing() -> None:
    identity = ServerIdentity()
    identity.seen("a")
    identity.accept()
    assert identity.known == "a"


def test_redis_health_settles_a_suspicion_and_hands_out_a_resync_once() -> None:
    from ingest.redis_health import RedisHealth

    health = RedisHealth()
    health.positioned_from("a")
    health.failed()
    assert health.suspect and not health.take_resync()
    health.answered("b")  # asked after the failure: another server
    assert not health.suspect and health.identity.restarted_as == "b"
    health.lost_checkpoint()
    assert health.suspect and health.take_resync() and not health.take_resync()
