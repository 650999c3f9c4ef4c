"""The worker over TLS, end to end: a broker reachable only through a TLS-terminating proxy that demands a
client certificate (CA and certificates made here), score events produced by the load generator over TLS,
boards equal to the reference, dead letters produced over TLS; a wrong CA is named and retried, never a crash."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from cli.devstack import KafkaBroker, StackError, tansu_binary
from cli.loadgen import publish
from cli.process import LOOPBACK, free_port
from hotboard import kafka_security
from ingest.dlq import ERROR_HEADER
from ingest.kafka_config import KafkaUnavailable
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.integration.harness import (
    read_boards,
    read_topic,
    run_worker,
    sample,
    skewed_events,
    totals_of,
    worker_settings,
)
from tests.services import unavailable
from tests.tls import Certs, TlsProxy, make_ca, make_certs

pytestmark = pytest.mark.integration


class _ProxiedBroker(KafkaBroker):
    """Plain TCP on ``port``, advertising ``advertised_port`` (the TLS proxy) to clients in metadata."""

    def __init__(self, port: int, advertised_port: int, log_dir: Path) -> None:
        super().__init__(port, log_dir)
        self.advertised_port = advertised_port

    def command(self) -> list[str]:
        listen, advertised = (f"tcp://{LOOPBACK}:{p}" for p in (self.port, self.advertised_port))
        return [str(tansu_binary()), "broker", "--listener-url", listen, "--advertised-listener-url", advertised]


@dataclass(frozen=True)
class TlsKafka:
    bootstrap: str
    certs: Certs
    wrong_ca: Path
    proxy: TlsProxy

    def tls(self, **kw: Any) -> dict[str, Any]:
        """The worker settings of a client with its certificate, trusting the test CA."""
        return {
            "kafka_security_protocol": "SSL",
            "kafka_ssl_cafile": str(self.certs.ca),
            "kafka_ssl_certfile": str(self.certs.client_cert),
            "kafka_ssl_keyfile": str(self.certs.client_key),
            **kw,
        }


@pytest.fixture(scope="module")
def tls_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    directory = tmp_path_factory.mktemp("kafka-tls")
    certs = make_certs(directory / "certs")
    wrong_ca, _ = make_ca(directory / "other", "other-ca")
    plain_port, tls_port = free_port(), free_port()
    broker = _ProxiedBroker(plain_port, tls_port, directory)
    try:
        broker.start()
    except StackError as exc:
        unavailable(f"embedded Kafka broker ({exc})")
    try:
        with TlsProxy(tls_port, plain_port, certs.server_context(require_client_cert=True)) as proxy:
            yield TlsKafka(f"{LOOPBACK}:{tls_port}", certs, wrong_ca, proxy)
    finally:
        broker.stop()


async def _create_topics(settings: WorkerSettings, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka, **kafka_security.client_kwargs(settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(settings.topic, partitions, 1), NewTopic(settings.dlq, 1, 1)])
        deadline = time.monotonic() + 20
        while not {settings.topic, settings.dlq} <= set(await admin.list_topics()):
            assert time.monotonic() < deadline, "topics did not appear"
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def test_the_worker_consumes_and_dead_letters_over_tls_with_a_client_certificate(
    tls_kafka: TlsKafka, redis_url: str
) -> None:
    topic = f"tls-{time.monotonic_ns()}"
    settings = worker_settings(tls_kafka.bootstrap, redis_url, topic, f"g-{topic}", **tls_kafka.tls())
    await _create_topics(settings, partitions=4)
    events = skewed_events(3000, players=300, boards=2, seed=7)
    invalid = [(f"bad-{i}".encode(), b"not json") for i in range(5)]
    security = kafka_security.client_kwargs(settings)
    await publish(settings.kafka, topic, events, security=security)
    await publish(settings.kafka, topic, invalid, security=security)
    expected = totals_of(events)

    def done(worker: Worker) -> bool:
        letters = sample(worker, "hotboard_dlq_total", reason="not_json")
        return letters == len(invalid) and worker._dead.pending == 0 and read_boards(redis_url, expected) == expected

    await run_worker(settings, done, "every event folded and every letter acknowledged")
    assert read_boards(redis_url, expected) == expected
    letters = await read_topic(settings.kafka, settings.dlq, len(invalid), security=security)
    assert sorted(r.key or b"" for r in letters) == sorted(key for key, _ in invalid)
    assert all(dict(r.headers)[ERROR_HEADER] for r in letters)
    assert tls_kafka.proxy.connections > 0


async def test_a_wrong_ca_is_named_and_retried_until_the_start_timeout(
    tls_kafka: TlsKafka, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The start waits out ``kafka_start_timeout_s`` retrying (a CA mounted late is picked up by the next
    attempt's process, not a crash loop), and every line says what is wrong: the certificate check failed."""
    tls = tls_kafka.tls(kafka_ssl_cafile=str(tls_kafka.wrong_ca))
    settings = worker_settings(tls_kafka.bootstrap, redis_url, "never", "g-never", kafka_start_timeout_s=3, **tls)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hotboard.worker"), pytest.raises(KafkaUnavailable) as raised:
        async with Worker(settings, handle_signals=False):
            pass
    assert time.monotonic() - started >= 2.5
    assert "certificate verify failed" in str(raised.value), raised.value
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retries and all("certificate verify failed" in line for line in retries), retries


async def test_hostname_verification_refuses_a_certificate_for_another_host(
    tls_kafka: TlsKafka, redis_url: str
) -> None:
    """The proxy's certificate names IP 127.0.0.1; reached as ``localhost`` it does not match, unless the
    hostname check is turned off (the chain is still verified)."""
    port = tls_kafka.bootstrap.rpartition(":")[2]
    checked = WorkerSettings(kafka=f"localhost:{port}", **tls_kafka.tls())
    reason = await kafka_security.tls_failure(checked.kafka, checked)
    assert reason is not None and "Hostname mismatch" in reason, reason
    unchecked = WorkerSettings(kafka=f"localhost:{port}", **tls_kafka.tls(kafka_ssl_check_hostname=False))
    assert await kafka_security.tls_failure(unchecked.kafka, unchecked) is None
