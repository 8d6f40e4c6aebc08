"""What a worker process's heartbeat says it is doing (observability/heartbeat.py's Activity)."""

from __future__ import annotations

import threading

from observability.heartbeat import Activity


def test_a_thread_running_several_jobs_at_once_is_one_busy_thread() -> None:
    """A worker thread running a batch begins each of its jobs on its own: it shows as its first
    job and how many more, and counts as one busy thread, beside the other threads' jobs."""
    activity = Activity()
    assert (activity(), activity.busy()) == ("idle", 0)
    batch = [activity.begin(f"report {n}") for n in (42, 43, 44)]
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(activity.begin("report 7")))
    thread.start()
    thread.join()
    assert (activity(), activity.busy()) == ("report 42 (+2), report 7", 2)
    for token in batch:
        activity.end(token)
    assert (activity(), activity.busy()) == ("report 7", 1)
    activity.end(other[0])
    assert (activity(), activity.busy()) == ("idle", 0)
