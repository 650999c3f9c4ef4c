"""The pure parts of live streams: the event encoding, a stream's one pending answer, a channel's unchanged
answers (no event) and the cap, without a server."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from reader_api.errors import ApiError
from reader_api.sse import event
from reader_api.stream_settings import StreamSettings
from reader_api.streams import Answer, StreamMetrics, Streams, Subscription


@pytest.mark.parametrize(
    ("answer", "encoded"),
    [
        (Answer(7, b'{"a":1}'), b'id: 7\ndata: {"a":1}\n\n'),
        (Answer(None, b"{}"), b"data: {}\n\n"),
        (Answer(None, b'{"error":"x"}', error=True), b'event: error\ndata: {"error":"x"}\n\n'),
    ],
)
def test_event_encoding(answer: Answer, encoded: bytes) -> None:
    assert event(answer) == encoded


def test_a_subscription_holds_only_the_latest_answer() -> None:
    s = Subscription()
    for version in (1, 2, 3):
        s.offer(Answer(version, b"x"))
    assert s.ready.is_set()
    assert s.take() == Answer(3, b"x") and s.take() is None and not s.ready.is_set()
    s.leave()
    assert s.gone and s.ready.is_set()


async def test_streams_share_a_channel_skip_unchanged_answers_and_refuse_past_the_cap() -> None:
    reads: list[Answer | None] = []

    async def read(known: Answer | None) -> Answer | None:
        reads.append(known)
        return Answer(1, b"page")

    streams = Streams(StreamMetrics(CollectorRegistry()), StreamSettings(api_max_streams=2, api_stream_poll_ms=10_000))
    one, first = await streams.subscribe("k", read)
    two, again = await streams.subscribe("k", read)
    assert first == again == Answer(1, b"page") and len(reads) == 1  # the second stream reads nothing
    with pytest.raises(ApiError) as refused:
        await streams.subscribe("other", read)
    assert (refused.value.status, refused.value.code) == (503, "too_many_streams")
    channel = streams._channels["k"]
    Streams._publish(channel, Answer(2, b"page"))  # a new version, the same answer: no event
    assert not one.ready.is_set() and channel.latest == Answer(2, b"page")
    Streams._publish(channel, Answer(3, b"other"))
    assert one.take() == two.take() == Answer(3, b"other")
    streams.unsubscribe("k", one)
    assert streams.open == 1
    await streams.close()
