"""config.collector: the collector's generation-0 pass spaced out, the older ones' ratios kept."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from config.collector import DEFAULT_GEN0_THRESHOLD, space_collections


@pytest.fixture(autouse=True)
def _restore_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_space_collections_raises_generation_zero_and_keeps_the_ratios() -> None:
    gc.set_threshold(700, 10, 10)
    space_collections()
    assert gc.get_threshold() == (DEFAULT_GEN0_THRESHOLD, 10, 10)
    space_collections(2_000)
    assert gc.get_threshold() == (2_000, 10, 10)


def test_a_threshold_of_zero_would_disable_the_collector_and_is_refused_as_one() -> None:
    space_collections(0)
    assert gc.get_threshold()[0] == 1
