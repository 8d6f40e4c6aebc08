"""Leader/follower group commit: the requests of many threads run together, a group at a time.

A thread that submits when no group is running becomes the leader: it takes every pending
request at once, its own first, up to `max_group`, runs them with one call of `run` (one
transaction), hands each request its own result, and wakes the others. Threads that submit
while a group runs wait; when it ends, one of them leads the next group with all the requests
gathered meanwhile. There is no timer: a lone request runs at once, as a group of one, so an
idle worker adds no latency, and the busier the threads, the larger the groups.

One group runs at a time per coordinator, so the groups of one process never wait on each
other's row locks; `run` must lock in a fixed order (by id) so the groups of two processes
cannot deadlock either.

The coordinator knows nothing of databases: `run` returns one result per request, in the
order of the keys it was given (a value, or an exception instance to raise in that request's
thread; a key submitted twice appears twice, for `run` to decide what the second gets), and
when `run` itself raises, every request of the group gets `GroupFailed` with the cause, to
decide on its own what to do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")

#: Default of `max_group`: requests in one group at most (the Procfile's threads are fewer,
#: so in practice a group is every request in hand).
DEFAULT_MAX_GROUP = 64


class GroupFailed(Exception):
    """The group of this request failed as a whole (`__cause__` says why): it has no result."""


def _held_lock() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass(eq=False)
class _Request(Generic[K, R]):
    key: K
    done: bool = False
    #: Designated to lead the next group by the leader of the last one (read only if its
    #: thread is interrupted before it leads: the leadership is then passed on).
    lead: bool = False
    result: R | BaseException | None = None
    failure: BaseException | None = field(default=None, repr=False)
    #: Held until the request is done or designated: its thread blocks on it alone, so the end
    #: of a group wakes its members and the next leader, not every thread waiting (with 64
    #: threads a shared condition woke ~60 per group, most only to wait again: issue 24).
    wake: threading.Lock = field(default_factory=_held_lock, repr=False)


@dataclass(frozen=True)
class GroupStats:
    """Counts since the coordinator was made: `requests / groups` is the mean group size."""

    groups: int
    requests: int
    largest: int


class GroupCommit(Generic[K, R]):
    """`submit(key)` from any number of threads; `run(keys)` sees each group once."""

    def __init__(
        self,
        run: Callable[[Sequence[K]], Sequence[R | BaseException]],
        *,
        max_group: int = DEFAULT_MAX_GROUP,
        on_group: Callable[[int], None] | None = None,
    ) -> None:
        """`on_group(size)` is called by each leader before it runs its group (for a metric)."""
        if max_group < 1:
            raise ValueError(f"max_group must be at least 1, got {max_group}")
        self._run = run
        self._max_group = max_group
        self._on_group = on_group
        self._mutex = threading.Lock()
        self._pending: list[_Request[K, R]] = []
        #: A group is running, or its next leader has been designated and is on its way.
        self._running = False
        self._groups = 0
        self._requests = 0
        self._largest = 0

    @property
    def stats(self) -> GroupStats:
        with self._mutex:
            return GroupStats(self._groups, self._requests, self._largest)

    @property
    def waiting(self) -> int:
        """Requests waiting for the next group."""
        with self._mutex:
            return len(self._pending)

    def submit(self, key: K) -> R:
        """The result of `key` in the group it ran in; raises the exception `run` gave for it,
        or `GroupFailed` when the whole group failed."""
        request: _Request[K, R] = _Request(key)
        with self._mutex:
            follower = self._running
            if follower:
                self._pending.append(request)
            else:
                self._running = True
        if follower:
            try:
                request.wake.acquire()
            except BaseException:
                # Interrupted (a time limit): not taken yet, so never run; leadership handed to
                # it is passed on, so nobody waits forever.
                self._abandon(request)
                raise
        if not request.done:
            self._lead(request)
        return self._outcome(request)

    def _abandon(self, request: _Request[K, R]) -> None:
        with self._mutex:
            if request.done:
                return
            if request in self._pending:
                self._pending.remove(request)
            elif request.lead:
                request.lead = False
                self._designate()

    def _designate(self) -> None:
        """Under the mutex, at the end of a group: the oldest waiting request leads the next
        one (woken alone), or no group runs."""
        if self._pending:
            nxt = self._pending.pop(0)
            nxt.lead = True
            nxt.wake.release()
        else:
            self._running = False

    def _take(self, own: _Request[K, R]) -> list[_Request[K, R]]:
        """The leader's group: its own request, then the oldest pending ones, up to the cap."""
        group = [own, *self._pending[: self._max_group - 1]]
        del self._pending[: self._max_group - 1]
        return group

    def _lead(self, own: _Request[K, R]) -> None:
        group = [own]
        results: Sequence[R | BaseException] = ()
        failure: BaseException | None = None
        try:
            with self._mutex:
                group = self._take(own)
            if self._on_group is not None:
                self._on_group(len(group))
            results = self._run([r.key for r in group])
            if len(results) != len(group):
                raise RuntimeError(f"{len(results)} results for a group of {len(group)}")
        except Exception as exc:
            failure = exc
        finally:
            # Also on BaseException (a time limit in the leader): the followers must never wait forever.
            with self._mutex:
                for index, r in enumerate(group):
                    if failure is None and index < len(results):
                        r.result = results[index]
                    else:
                        r.failure = failure or RuntimeError(
                            f"the leader of {r.key!r}'s group was interrupted"
                        )
                    r.done = True
                    r.lead = False
                    if r is not own:
                        r.wake.release()
                self._groups += 1
                self._requests += len(group)
                self._largest = max(self._largest, len(group))
                self._designate()

    @staticmethod
    def _outcome(request: _Request[K, R]) -> R:
        if request.failure is not None:
            raise GroupFailed(f"the group of {request.key!r} failed: {request.failure}") from request.failure
        if isinstance(request.result, BaseException):
            raise request.result
        return request.result  # type: ignore[return-value]
