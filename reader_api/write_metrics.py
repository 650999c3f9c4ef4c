"""Prometheus metrics of the writes and waits, on the app's own registry (:class:`reader_api.metrics.ApiMetrics`).
Labels stay bounded: ``reason`` is a codec reason (:class:`hotboard.codec.Reason`), ``outcome`` a fixed set."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from reader_api.metrics import BUCKETS

#: How a wait ended: covered (exactly at the first covering window, or later), timed out, or the event went to
#: the dead-letter topic.
WAIT_OUTCOMES = ("exact", "covered", "timeout", "dead_lettered")


class WriteMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.accepted = Counter(
            "hotboard_api_events_accepted", "Events acknowledged by Kafka through the write API", registry=registry
        )
        self.rejected = Counter(
            "hotboard_api_events_rejected",
            "Events the write API refused, by codec reason",
            ["reason"],
            registry=registry,
        )
        self.produce_seconds = Histogram(
            "hotboard_api_produce_seconds",
            "Time from handing a write's records to Kafka to the last acknowledgement",
            buckets=(*BUCKETS, 5.0, 10.0),
            registry=registry,
        )
        self.produce_failures = Counter(
            "hotboard_api_produce_failures",
            "Writes Kafka did not acknowledge, by outcome (not_sent, unknown)",
            ["outcome"],
            registry=registry,
        )
        self.waits = Counter(
            "hotboard_api_waits", "Waits for a write to be applied, by outcome", ["kind", "outcome"], registry=registry
        )
