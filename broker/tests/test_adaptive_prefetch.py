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


@pytest.mark.parametrize("pace", [PREFETCH_HOLD_SECONDS / 10, 1e-9, 0.0])
def test_a_batched_actor_holds_twice_the_hold(pace: float) -> None:
    assert adaptive_prefetch(2, pace, batched=True) == BATCHES_HELD * adaptive_prefetch(2, pace)


@pytest.mark.parametrize("pace", [None, PREFETCH_HOLD_SECONDS, 30.0])
def test_a_slow_or_new_batched_actor_keeps_dramatiqs_prefetch(pace: float | None) -> None:
    assert adaptive_prefetch(4, pace, batched=True) == 4
