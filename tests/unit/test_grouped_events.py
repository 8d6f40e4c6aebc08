"""The worker's grouped event sink (services/usecases/grouped_events.py), with plain threads
and an in-memory sink (a pure unit test: the Redis sink has its own integration tests)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from services.domain.events import Event, EventsDropped, EventType, emit
from services.usecases.grouped_events import GroupedEventSink
from tests.support.processes import wait_until


class HeldSink:
    """Records each call's events; its first call waits until released (so others gather)."""

    def __init__(self, *, fail_with: Exception | None = None) -> None:
        self.calls: list[list[int | None]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_with = fail_with
        self._first = True

    def emit_many(self, events: Sequence[Event]) -> None:
        self.calls.append([e.record_id for e in events])
        if self._first:
            self._first = False
            self.entered.set()
            self.release.wait(10)
            return
        if self.fail_with is not None:
            raise self.fail_with


def event(record_id: int) -> Event:
    return Event.new(EventType.REPORT_GENERATION_FAILED, record_id=record_id, actor="worker", data={})


def gathered(sink: HeldSink, grouped: GroupedEventSink, record_ids: Sequence[int]) -> list[bool]:
    """Record 0's event in a call of its own (held), then `record_ids`' events from a thread
    each, gathered behind it; emit()'s result per thread."""
    first = threading.Thread(target=emit, args=(grouped, event(0)))
    first.start()
    assert sink.entered.wait(10)
    results: dict[int, bool] = {}

    def one(index: int, record_id: int) -> None:
        results[index] = emit(grouped, event(record_id))

    threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(record_ids)]
    for t in threads:
        t.start()
    wait_until(lambda: grouped.waiting == len(record_ids), timeout=10, what="the events gathered")
    sink.release.set()
    for t in [first, *threads]:
        t.join(10)
    return [results[i] for i in range(len(record_ids))]


def test_events_handed_over_together_go_in_one_call() -> None:
    sink = HeldSink()
    grouped = GroupedEventSink(sink)
    assert gathered(sink, grouped, [1, 2, 3]) == [True, True, True]
    assert sink.calls[0] == [0]
    assert sorted(sink.calls[1]) == [1, 2, 3]  # type: ignore[type-var]
    assert len(sink.calls) == 2


def test_a_lone_event_goes_at_once() -> None:
    sink = HeldSink()
    sink.release.set()
    grouped = GroupedEventSink(sink)
    assert emit(grouped, event(5))
    assert sink.calls == [[5]]


@pytest.mark.parametrize("failure", [EventsDropped("nowhere"), RuntimeError("boom")])
def test_a_failed_call_fails_each_caller_on_its_own(failure: Exception) -> None:
    sink = HeldSink(fail_with=failure)
    grouped = GroupedEventSink(sink)
    # emit() never raises: each caller learns of the failure (False) by itself.
    assert gathered(sink, grouped, [1, 2]) == [False, False]
    assert len(sink.calls) == 2
