"""The failing loop's backoff (broker/src/listbroker/backoff.py): its waits and its few log lines."""

from __future__ import annotations

import logging

import pytest
from listbroker import Backoff
from listbroker.backoff import MAX_ERROR_CHARS, one_line


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.backoff"]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def backoff(clock: Clock) -> Backoff:
    log = logging.getLogger("test.backoff")
    return Backoff("Step", log, first_s=0.5, max_s=4.0, summary_s=60, clock=clock)


def test_the_wait_doubles_up_to_its_cap_and_is_zero_again_after_a_success(backoff: Backoff) -> None:
    assert (backoff.delay, backoff.failing) == (0.0, False)
    waits = [backoff.failed(ConnectionError("refused")) for _ in range(6)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert (backoff.attempts, backoff.failing) == (6, True)
    assert backoff.succeeded()
    assert (backoff.delay, backoff.attempts, backoff.failing) == (0.0, 0, False)
    assert backoff.failed("again") == 0.5
    assert not Backoff("x", logging.getLogger("test.backoff")).succeeded()


def test_an_outage_is_logged_once_then_a_summary_a_minute_then_its_end(
    backoff: Backoff, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "test.backoff")
    for _ in range(1000):  # 1000 attempts over 150 s: three lines, not a thousand
        backoff.failed(ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."))
        clock.now += 0.15
    backoff.succeeded()
    assert messages(caplog) == [
        "Step: ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.;"
        " retrying in 0.5 s (backing off up to 4 s)",
        "Step: still failing after 401 attempts / 60 s:"
        " ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.",
        "Step: still failing after 801 attempts / 120 s:"
        " ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.",
        "Step: recovered after 1000 failed attempt(s) / 150.0 s",
    ]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in caplog.records)


def test_an_unexpected_error_gets_its_traceback_once(
    backoff: Backoff, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "test.backoff")
    try:
        raise KeyError("bug")
    except KeyError as exc:
        backoff.failed(exc, traceback=True)
        backoff.failed(exc, traceback=True)
    (record,) = caplog.records
    assert record.exc_info is not None
    assert record.exc_info[0] is KeyError


def test_an_error_is_one_short_line() -> None:
    multi = OSError("connection failed: refused\n\tIs the server running on that host?")
    assert one_line(multi) == "OSError: connection failed: refused"
    assert one_line(RuntimeError()) == "RuntimeError"
    assert one_line("  plain text  ") == "plain text"
    assert len(one_line(ValueError("x" * 5000))) == MAX_ERROR_CHARS


def test_first_must_be_positive_and_at_most_the_cap() -> None:
    with pytest.raises(ValueError, match="first_s"):
        Backoff("x", logging.getLogger("test.backoff"), first_s=0)
    with pytest.raises(ValueError, match="first_s"):
        Backoff("x", logging.getLogger("test.backoff"), first_s=2, max_s=1)
