"""The events of a worker process's threads handed over together: one call of the sink per group.

Each report job logs its outcome as an event (actors/report.py), one Redis round trip per job
(issue 24: about a tenth of the worker's interpreter time). Jobs finish together, a generation
group at a time (services/usecases/report_groups.py), so their events come together too.
`GroupedEventSink` wraps any `EventSink` with the same leader/follower coordinator as group
commit (services/persistence/group_commit.py: no timer, a lone event goes at once): the events
handed over while one call runs go in the next call, in one `emit_many`.

Nothing else changes for the caller: `emit_many` returns once its events are handed over (or
raises when they were not), so a job still ends after its event, and `emit()` still reports
and counts a failure per caller.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.domain.events import Event, EventsDropped, EventSink
from services.persistence.group_commit import DEFAULT_MAX_GROUP, GroupCommit, GroupFailed


class GroupedEventSink:
    """`EventSink`: the calls of concurrent threads coalesced into calls of `sink.emit_many`."""

    def __init__(self, sink: EventSink, *, max_group: int = DEFAULT_MAX_GROUP) -> None:
        self.sink = sink
        self._groups: GroupCommit[tuple[Event, ...], None] = GroupCommit(self._run, max_group=max_group)

    @property
    def waiting(self) -> int:
        """Calls waiting for the next group."""
        return self._groups.waiting

    def emit_many(self, events: Sequence[Event]) -> None:
        if not events:
            return
        try:
            self._groups.submit(tuple(events))
        except GroupFailed as exc:
            cause = exc.__cause__
            # A fresh instance per thread (an exception carries its traceback). EventsDropped:
            # the sink has logged and counted the group's events already.
            if isinstance(cause, EventsDropped):
                raise EventsDropped(str(cause)) from cause
            raise RuntimeError(f"event sink failed: {cause}") from cause

    def _run(self, batches: Sequence[tuple[Event, ...]]) -> list[None]:
        self.sink.emit_many([event for batch in batches for event in batch])
        return [None] * len(batches)
