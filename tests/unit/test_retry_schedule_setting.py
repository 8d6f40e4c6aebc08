"""REPORT_RETRY_DELAYS_MS: tests shorten the retry schedule; unset, it is exactly 10/30/60 s."""

from __future__ import annotations

import pytest

from config.retries import RETRY_DELAYS_ENV, RETRY_DELAYS_MS
from config.settings import retry_delays_ms


def test_the_default_schedule_is_the_seeds() -> None:
    assert RETRY_DELAYS_MS == (10_000, 30_000, 60_000)
    assert retry_delays_ms({}) == RETRY_DELAYS_MS
    assert retry_delays_ms({RETRY_DELAYS_ENV: "  "}) == RETRY_DELAYS_MS


def test_a_shorter_schedule_for_tests() -> None:
    assert retry_delays_ms({RETRY_DELAYS_ENV: "200, 300,0"}) == (200, 300, 0)


@pytest.mark.parametrize("raw", ["200,200", "1,2,3,4", "a,b,c", "200;200;200", "-1,0,0", "1.5,2,3"])
def test_a_malformed_schedule_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=RETRY_DELAYS_ENV):
        retry_delays_ms({RETRY_DELAYS_ENV: raw})
