"""The leader/follower group commit, with plain threads and no database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.persistence.group_commit import GroupCommit, GroupFailed


class Recorder:
    """A `run` that records its groups, answers key × 10, and can be held inside a group."""

    def __init__(self, *, hold_first: bool = False) -> None:
        self.groups: list[list[int]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self._hold = hold_first
        self._running = 0
        self._lock = threading.Lock()
        self.overlapped = False

    def __call__(self, keys: Sequence[int]) -> list[int | BaseException]:
        with self._lock:
            self._running += 1
            self.overlapped |= self._running > 1
            self.groups.append(list(keys))
        self.entered.set()
        if self._hold:
            self._hold = False
            self.release.wait(10)
        with self._lock:
            self._running -= 1
        return [k * 10 for k in keys]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait for another thread to get somewhere (a sync point, not a timing assertion)."""
    deadline = time.monotonic() + 10
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def submit_all(
    commit: GroupCommit[int, int], keys: Sequence[int]
) -> tuple[list[threading.Thread], dict[int, object]]:
    """One thread per key, started; their results (value or exception) by thread index."""
    results: dict[int, object] = {}

    def one(index: int, key: int) -> None:
        try:
            results[index] = commit.submit(key)
        except BaseException as exc:  # collected for the assertions
            results[index] = exc

    threads = [threading.Thread(target=one, args=(i, k)) for i, k in enumerate(keys)]
    for t in threads:
        t.start()
    return threads, results


def test_a_lone_request_runs_at_once_as_a_group_of_one() -> None:
    run = Recorder()
    sizes: list[int] = []
    commit = GroupCommit(run, on_group=sizes.append)
    assert commit.submit(7) == 70
    assert run.groups == [[7]]
    assert sizes == [1]
    assert (commit.stats.groups, commit.stats.requests, commit.stats.largest) == (1, 1, 1)


def test_requests_arriving_during_a_group_form_the_next_one() -> None:
    run = Recorder(hold_first=True)
    commit = GroupCommit(run)
    first, first_result = submit_all(commit, [1])
    assert run.entered.wait(10)
    followers, results = submit_all(commit, [2, 3, 4, 5, 6])
    wait_for(lambda: commit.waiting == 5, "five requests waiting for the next group")
    assert run.groups == [[1]]  # nobody runs a second group while the first is running
    run.release.set()
    for t in [*first, *followers]:
        t.join(10)
    assert first_result == {0: 10}
    assert results == {0: 20, 1: 30, 2: 40, 3: 50, 4: 60}
    assert len(run.groups) == 2
    assert sorted(run.groups[1]) == [2, 3, 4, 5, 6]
    assert commit.stats.largest == 5


def test_a_group_never_exceeds_the_cap() -> None:
    run = Recorder(hold_first=True)
    commit = GroupCommit(run, max_group=2)
    first, _ = submit_all(commit, [1])
    assert run.entered.wait(10)
    followers, results = submit_all(commit, [2, 3, 4, 5, 6])
    wait_for(lambda: commit.waiting == 5, "five requests waiting")
    run.release.set()
    for t in [*first, *followers]:
        t.join(10)
    assert sorted(results.values()) == [20, 30, 40, 50, 60]  # type: ignore[type-var]
    assert max(len(g) for g in run.groups) == 2
    assert sorted(k for g in run.groups for k in g) == [1, 2, 3, 4, 5, 6]


def test_an_exception_for_one_key_is_raised_in_its_thread_only() -> None:
    def run(keys: Sequence[int]) -> list[int | BaseException]:
        return [ValueError(f"bad {k}") if k == 2 else k for k in keys]

    commit: GroupCommit[int, int] = GroupCommit(run)
    threads, results = submit_all(commit, [1, 2, 3])
    for t in threads:
        t.join(10)
    assert results[0] == 1
    assert results[2] == 3
    assert isinstance(results[1], ValueError)
    assert str(results[1]) == "bad 2"


def test_a_failed_group_fails_each_request_with_the_cause() -> None:
    cause = RuntimeError("connection lost")

    def run(keys: Sequence[int]) -> list[int | BaseException]:
        raise cause

    commit: GroupCommit[int, int] = GroupCommit(run)
    with pytest.raises(GroupFailed) as failed:
        commit.submit(1)
    assert failed.value.__cause__ is cause
    # The coordinator is free again: the next request leads its own group.
    with pytest.raises(GroupFailed):
        commit.submit(2)
    assert commit.stats.groups == 2


def test_a_run_that_answers_the_wrong_number_of_results_fails_the_group() -> None:
    commit: GroupCommit[int, int] = GroupCommit(lambda keys: [])
    with pytest.raises(GroupFailed, match="0 results for a group of 1"):
        commit.submit(1)


def test_max_group_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GroupCommit(Recorder(), max_group=0)


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=40),
    max_group=st.integers(min_value=1, max_value=8),
)
def test_every_request_runs_once_gets_its_own_result_and_groups_never_overlap(
    keys: list[int], max_group: int
) -> None:
    run = Recorder()
    commit = GroupCommit(run, max_group=max_group)
    threads, results = submit_all(commit, keys)
    for t in threads:
        t.join(10)
    assert results == {i: k * 10 for i, k in enumerate(keys)}
    assert sorted(k for g in run.groups for k in g) == sorted(keys)
    assert all(1 <= len(g) <= max_group for g in run.groups)
    assert not run.overlapped
    assert commit.stats.requests == len(keys)
    assert commit.waiting == 0


class Interrupted(BaseException):
    """As Dramatiq's time limit: raised into a thread, not an Exception."""


def test_an_interrupted_leader_frees_its_followers() -> None:
    release = threading.Event()
    entered = threading.Event()

    def run(keys: Sequence[int]) -> list[int | BaseException]:
        if keys == [1]:
            entered.set()
            release.wait(10)
            raise Interrupted
        return list(keys)

    commit: GroupCommit[int, int] = GroupCommit(run)
    leader, leader_result = submit_all(commit, [1])
    assert entered.wait(10)
    followers, results = submit_all(commit, [2, 3])
    wait_for(lambda: commit.waiting == 2, "two requests waiting")
    release.set()
    for t in [*leader, *followers]:
        t.join(10)
    assert isinstance(leader_result[0], Interrupted)  # the leader's own interruption goes on up
    # The others ran in the next group, led by one of them: nobody waits forever.
    assert results == {0: 2, 1: 3}
    assert commit.stats.groups == 2


def test_the_members_of_an_interrupted_leaders_group_get_group_failed() -> None:
    release = threading.Event()
    entered = threading.Event()

    def run(keys: Sequence[int]) -> list[int | BaseException]:
        if keys == [0]:
            entered.set()
            release.wait(10)
            return [0]
        raise Interrupted  # in the second group's leader, whichever thread it is

    commit: GroupCommit[int, int] = GroupCommit(run)
    first, _ = submit_all(commit, [0])
    assert entered.wait(10)
    members, results = submit_all(commit, [1, 2, 3])
    wait_for(lambda: commit.waiting == 3, "three requests waiting")
    release.set()
    for t in [*first, *members]:
        t.join(10)
    kinds = sorted(type(r).__name__ for r in results.values())
    assert kinds == ["GroupFailed", "GroupFailed", "Interrupted"]
    assert commit.waiting == 0
