"""The pure parts of the hot path: event codec, submission merge, settings, partition names."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from hotpath.runtime_settings import HotpathSettings, SettingsSource, env_name
from services.domain.errors import AutosaveUnavailable, ParamError
from services.domain.events import Event, EventType, InvalidEvent, emit
from services.domain.saved_answers import (
    SavedAnswer,
    from_epoch_ms,
    merge_submission,
    parse_saved,
    to_epoch_ms,
)
from services.persistence.partitions import add_months, is_partition_table, month_of, partition_name
from services.persistence.progress import parse_state
from web.auth import token_fingerprint

# -- events ----------------------------------------------------------------------------------


def test_event_round_trip() -> None:
    event = Event.new(
        EventType.ANSWERS_SAVED, record_id=5, user_id=7, actor="user:7", data={"q": [101], "中": "文"}
    )
    decoded = Event.decode(event.encode().encode())
    assert decoded == event
    assert json.loads(event.encode())["type"] == "answers.saved"


def test_event_times_are_normalised_to_utc() -> None:
    payload = {"id": str(uuid.uuid4()), "type": "x", "occurredAt": "2026-01-15T10:30:00+08:00"}
    assert Event.decode(json.dumps(payload)).occurred_at == datetime(2026, 1, 15, 2, 30, tzinfo=UTC)
    payload["occurredAt"] = "2026-01-15T10:30:00"
    assert Event.decode(json.dumps(payload)).occurred_at.tzinfo == UTC


VALID = {"id": "00000000-0000-0000-0000-000000000001", "type": "x", "occurredAt": "2026-01-01"}


def variant(**changes: object) -> bytes:
    return json.dumps({**VALID, **changes}).encode()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"nope",
        b"\xff",
        b"[]",
        b'{"type": "x", "occurredAt": "2026-01-01"}',
        variant(id="1"),
        variant(type=""),
        variant(type="t" * 65),
        variant(occurredAt=5),
        variant(recordId=0),
        variant(recordId=True),
        variant(userId=2**63),
        variant(data=[]),
        variant(data={"a": float("nan")}),
        variant(data={"a": "\x00"}),
        variant(actor=5),
    ],
)
def test_undecodable_events(raw: bytes) -> None:
    with pytest.raises(InvalidEvent):
        Event.decode(raw)


def test_emit_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def emit_many(self, events: object) -> None:
            raise ConnectionError("redis is down")

    with caplog.at_level(logging.ERROR):
        assert emit(Broken(), Event.new(EventType.ANSWERS_SAVED)) is False
    assert "could not log 1 event" in caplog.text
    assert emit(None, Event.new(EventType.ANSWERS_SAVED)) is True


def test_admin_fingerprint_is_short_stable_and_not_the_token() -> None:
    token = "adm_secret-token-value"
    assert token_fingerprint(token) == token_fingerprint(token)
    assert len(token_fingerprint(token)) == 12
    assert token_fingerprint(token) not in token
    assert token_fingerprint(token) != token_fingerprint(token + "x")


# -- submission merge ------------------------------------------------------------------------

ACTIVE = [1, 2, 3, 4]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_body_overrides_autosave_overrides_stored() -> None:
    stored = {1: (1, T0), 2: (1, T0), 9: (5, T0)}  # 9: a question no longer active
    autosaved = {2: SavedAnswer(2, 1_000), 3: SavedAnswer(2, 2_000), 8: SavedAnswer(4, 3_000)}
    merged = merge_submission(ACTIVE, stored, autosaved, [(3, 3), (4, 3)])
    assert merged.values == {1: 1, 2: 2, 3: 3, 4: 3}
    assert merged.answered_at == {1: T0, 2: from_epoch_ms(1_000)}
    assert (merged.from_autosave, merged.latest_saved_ms) == (1, 1_000)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([(1, 1), (1, 2)], "重复作答"),
        ([(7, 1)], "不属于本测评的题目：7"),
        ([(1, 6)], "1 到 5"),
        ([], "还有题目未作答：4"),
    ],
)
def test_the_body_is_checked_and_the_result_must_be_complete(
    body: list[tuple[int, int]], message: str
) -> None:
    with pytest.raises(ParamError, match=message):
        merge_submission(ACTIVE, {}, {q: SavedAnswer(3, 1) for q in (1, 2, 3)}, body)


def test_nothing_at_all_is_empty() -> None:
    with pytest.raises(ParamError, match="答案不能为空"):
        merge_submission(ACTIVE, {}, {}, [])


def test_unreadable_autosave_needs_a_complete_body() -> None:
    with pytest.raises(AutosaveUnavailable):
        merge_submission(ACTIVE, {q: (1, T0) for q in ACTIVE}, None, [(1, 2)])
    full = [(q, 2) for q in ACTIVE]
    assert merge_submission(ACTIVE, {}, None, full).values == dict(full)


def test_saved_hashes_and_progress_states_are_parsed_defensively() -> None:
    raw = {b"101": b"3:1700000000000", b"102": b"9:1", b"x": b"1:1", b"103": b"2", b"104": b"4:5"}
    assert parse_saved(raw, record_id=1) == {101: SavedAnswer(3, 1_700_000_000_000), 104: SavedAnswer(4, 5)}
    state = parse_state(1, {b"q": b"105", b"n": b"3", b"a": b"10", b"t": b"11"})
    assert state is not None
    assert (state.current_question_id, state.answered_count, state.updated_ms) == (105, 3, 11)
    assert parse_state(1, {b"q": b"105"}) is None
    assert parse_state(1, {b"q": b"", b"n": b"0", b"a": b"1", b"t": b"0"}) is None


def test_epoch_ms_is_exact() -> None:
    for ms in (0, 1, 1_767_225_600_123, 253_402_300_799_999):
        assert to_epoch_ms(from_epoch_ms(ms)) == ms


# -- settings --------------------------------------------------------------------------------


def test_settings_come_from_the_environment_then_the_defaults(caplog: pytest.LogCaptureFixture) -> None:
    env = {
        env_name("answers_batch"): "200",
        env_name("events_interval_ms"): "abc",
        env_name("lock_ttl_ms"): "5",
        env_name("progress_batch"): " 7 ",
    }
    source = SettingsSource(None, env=env)
    with caplog.at_level(logging.ERROR):
        settings = source.read()
        source.read()
    assert settings == HotpathSettings(answers_batch=200, progress_batch=7)
    assert caplog.text.count("HOTPATH_EVENTS_INTERVAL_MS") == 1  # logged once, not every cycle
    assert "HOTPATH_LOCK_TTL_MS" in caplog.text


# -- partitions ------------------------------------------------------------------------------


def test_month_arithmetic_and_names() -> None:
    assert month_of(datetime(2026, 1, 31, 23, 30, tzinfo=timezone(timedelta(hours=-5)))) == date(2026, 2, 1)
    assert add_months(date(2026, 11, 1), 2) == date(2027, 1, 1)
    assert add_months(date(2026, 1, 1), -1) == date(2025, 12, 1)
    assert partition_name(date(2026, 3, 1)) == "event_log_y2026m03"
    assert is_partition_table("event_log_y2026m03")
    assert is_partition_table("event_log_default")
    assert not is_partition_table("event_log")
