"""The consumer's prefetch follows the actor's pace, within Dramatiq's prefetch and a fixed cap."""

from __future__ import annotations

import pytest
from listbroker.consumer import BATCHES_HELD, MAX_ADAPTIVE_PREFETCH, PREFETCH_HOLD_SECONDS, adaptive_prefetch


@pytest.mark.parametrize("prefetch", [1, 2, 16])
def test_a_slow_actor_keeps_dramatiqs_prefetch(prefetch: int) -> None:
    assert adaptive_prefetch(prefetch, PREFETCH_HOLD_SECONDS) == prefetch
    assert adaptive_prefetch(prefetch, 30.0) == prefetch


def test_a_fast_actor_gets_the_hold_time_of_messages() -> None:
    assert adaptive_prefetch(2, PREFETCH_HOLD_SECONDS / 10) == 10


@pytest.mark.parametrize("pace", [0.0, 1e-9, PREFETCH_HOLD_SECONDS / 1000])
def test_however_fast_never_more_than_the_cap(pace: float) -> None:
    assert adaptive_prefetch(2, pace) == MAX_ADAPTIVE_PREFETCH


def test_a_prefetch_above_the_cap_is_kept() -> None:
    assert adaptive_prefetch(MAX_ADAPTIVE_PREFETCH * 2, 1e-6) == MAX_ADAPTIVE_PREFETCH * 2


@pytest.mark.parametrize("pace", [None, 30.0, PREFETCH_HOLD_SECONDS / 10, 1e-9, 0.0])
def test_a_batched_actor_holds_two_batches_at_any_pace(pace: float | None) -> None:
    assert adaptive_prefetch(2, pace, batch_size=100) == max(BATCHES_HELD * 100, MAX_ADAPTIVE_PREFETCH)
    assert adaptive_prefetch(2, pace, batch_size=3) == max(6, adaptive_prefetch(2, pace))


def test_a_prefetch_above_two_batches_is_kept() -> None:
    assert adaptive_prefetch(500, 1e-6, batch_size=100) == 500
    assert adaptive_prefetch(4, None) == 4  # not batched, pace not known yet: Dramatiq's prefetch
