"""The report message on the wire (seed 000, property 1) and its codec."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from listbroker import DEAD_LETTER_OPTION

from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_ACTOR_NAME, REPORT_QUEUE_NAME
from redis_adapters.report_codec import REPORT_MESSAGE_NAMESPACE, ReportCodec, message_id_of
from redis_adapters.report_message import MAX_RECORD_ID, DeadMark, InvalidReportMessage, ReportQueueMessage

record_ids = st.integers(min_value=1, max_value=MAX_RECORD_ID)
retry_counts = st.integers(min_value=0, max_value=MAX_RETRY_COUNT)
offsets = st.one_of(
    st.none(),
    st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m))),
)


@st.composite
def enqueue_times(draw: st.DrawFn) -> str:
    """ISO-8601 texts as .NET and Python write them: 0-7 fraction digits, with or without offset."""
    moment = draw(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)))
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    digits = draw(st.integers(min_value=0, max_value=7))
    if digits:
        text += "." + "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=digits, max_size=digits)))
    tz = draw(offsets)
    if tz is not None:
        # "+08:00" as .NET writes a local time, "Z" for UTC.
        offset = moment.replace(tzinfo=tz).isoformat()[-6:]
        text += "Z" if offset in ("+00:00", "-00:00") and draw(st.booleans()) else offset
    return text


messages = st.builds(ReportQueueMessage, record_ids, retry_counts, enqueue_times())


@settings(max_examples=200)
@given(messages)
def test_property_1_queue_message_serialization_round_trip(message: ReportQueueMessage) -> None:
    """Feature: redis-report-queue, Property 1: 队列消息序列化/反序列化 round trip."""
    encoded = message.encode()
    assert ReportQueueMessage.decode(encoded) == message
    assert ReportQueueMessage.decode(encoded.encode("utf-8")) == message
    # PascalCase, exactly the three fields of the .NET model, in its order.
    assert list(json.loads(encoded)) == ["RecordId", "RetryCount", "EnqueueTime"]


@settings(max_examples=100)
@given(messages)
def test_codec_round_trip_through_a_dramatiq_message(message: ReportQueueMessage) -> None:
    codec = ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)
    decoded = codec.decode(message.encode().encode())
    assert decoded.args == (message.record_id,)
    assert decoded.actor_name == REPORT_ACTOR_NAME
    assert codec.encode(decoded) == message.encode()


@pytest.mark.parametrize(
    "raw",
    [
        '{"RecordId":12345,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        '{"RecordId":12345,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00.1234567"}',
        '{"RecordId":12345,"RetryCount":2,"EnqueueTime":"2025-01-15T10:30:00.1234567+08:00"}',
        '{"RecordId":9223372036854775807,"RetryCount":3,"EnqueueTime":"2025-01-15T02:30:00Z"}',
        '{ "RecordId" : 7 , "RetryCount" : 1 , "EnqueueTime" : "2025-01-15T10:30:00.5-05:00" }',
    ],
)
def test_dotnet_producer_messages_decode_and_keep_their_text(raw: str) -> None:
    message = ReportQueueMessage.decode(raw)
    data = json.loads(raw)
    assert (message.record_id, message.retry_count, message.enqueue_time) == (
        data["RecordId"],
        data["RetryCount"],
        data["EnqueueTime"],
    )
    assert ReportQueueMessage.decode(message.encode()) == message


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"",
        b"[1, 2]",
        b'"12345"',
        b'{"RecordId":1,"RetryCount":0}',
        b'{"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":0,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":-5,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":9223372036854775808,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":"12","RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":12.0,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":true,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":12,"RetryCount":-1,"EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":12,"RetryCount":"1","EnqueueTime":"2025-01-15T10:30:00"}',
        b'{"RecordId":12,"RetryCount":0,"EnqueueTime":"yesterday"}',
        b'{"RecordId":12,"RetryCount":0,"EnqueueTime":1736908200}',
        b'{"recordId":12,"retryCount":0,"enqueueTime":"2025-01-15T10:30:00"}',
        b"\xff\xfe\x00",
        # Not UTF-8: the job index reads RecordId from UTF-8 text only (json.loads took these).
        '{"RecordId":12,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}'.encode("utf-16"),
        '{"RecordId":12,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}'.encode("utf-8-sig"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(raw: bytes) -> None:
    with pytest.raises(InvalidReportMessage) as excinfo:
        ReportQueueMessage.decode(raw)
    assert str(excinfo.value)


def test_new_message_is_a_first_attempt_with_an_offset() -> None:
    message = ReportQueueMessage.new(99)
    assert message.retry_count == 0
    assert message.enqueued_at.tzinfo is not None
    assert abs(message.enqueued_at - datetime.now(UTC)) < timedelta(seconds=5)


def test_retried_keeps_record_and_enqueue_time() -> None:
    message = ReportQueueMessage(5, 0, "2025-01-15T10:30:00")
    assert message.retried(1) == ReportQueueMessage(5, 1, "2025-01-15T10:30:00")


def test_a_dead_letter_keeps_the_dotnet_fields_first_and_round_trips() -> None:
    dead = DeadMark("2026-12-01T00:00:00.000+00:00", "RuntimeError: 失败", 4)
    message = ReportQueueMessage(5, 3, "2025-01-15T10:30:00.1234567+08:00", dead)
    encoded = message.encode()
    dotnet = '{"RecordId":5,"RetryCount":3,"EnqueueTime":"2025-01-15T10:30:00.1234567+08:00"'
    assert encoded.startswith(dotnet + ',"DeadAt":')
    fields = ["RecordId", "RetryCount", "EnqueueTime", "DeadAt", "LastError", "Attempts"]
    assert list(json.loads(encoded)) == fields
    assert ReportQueueMessage.decode(encoded) == message
    codec = ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)
    decoded = codec.decode(encoded.encode())
    assert decoded.options[DEAD_LETTER_OPTION] == dead.as_option()
    assert codec.encode(decoded) == encoded


@pytest.mark.parametrize(
    "extra",
    ['"DeadAt":5', '"DeadAt":null,"LastError":"x"', '"LastError":"x","Attempts":2'],
)
def test_malformed_dead_letter_fields_are_ignored_not_refused(extra: str) -> None:
    """They are ours, not the .NET contract's: the job itself is still valid."""
    job = '{"RecordId":5,"RetryCount":3,"EnqueueTime":"2025-01-15T10:30:00",'
    message = ReportQueueMessage.decode(job + extra + "}")
    assert message == ReportQueueMessage(5, 3, "2025-01-15T10:30:00")


@settings(max_examples=200)
@given(st.one_of(st.binary(max_size=300), messages.map(lambda m: m.encode().encode())))
def test_a_payloads_message_id_is_its_uuid5(payload: bytes) -> None:
    """The codec's message id, built by hand for speed, is uuid5 of the payload read as Latin-1
    (any bytes: a payload is not always UTF-8), as the worker's ids always were."""
    expected = str(uuid.uuid5(REPORT_MESSAGE_NAMESPACE, payload.decode("latin-1")))
    assert message_id_of(payload) == expected
    if _valid(payload):
        assert ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME).decode(payload).message_id == expected


def _valid(payload: bytes) -> bool:
    try:
        ReportQueueMessage.decode(payload)
    except InvalidReportMessage:
        return False
    return True
