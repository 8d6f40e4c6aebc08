"""A burst of submissions: several users at once, each taking assessments one after another.

Each user runs in a thread of its own and goes through the mini-program's steps over
HTTP (create, start, autosave, submit: `User.take_assessment`) until the burst has made
its number of submissions or is stopped; a step answered 503 is retried, as the app does.
"""

from __future__ import annotations

import threading
import time

from tests.system.shipped import ShippedStack, Submission, User

#: First user id of a burst (the demo's users start at 1001; these are apart).
FIRST_USER = 5001


class Burst:
    def __init__(self, stack: ShippedStack, *, users: int = 4, limit: int = 10_000) -> None:
        self.users = {FIRST_USER + n: stack.user(FIRST_USER + n) for n in range(users)}
        self.limit = limit
        self.submissions: list[Submission] = []
        self.owners: dict[int, int] = {}  # record id -> user id
        self.failures: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._busy: set[int] = set()  # users with a submission in progress
        self._threads = [
            threading.Thread(target=self._run, args=(user_id,), name=f"user-{user_id}", daemon=True)
            for user_id in self.users
        ]

    def start(self) -> Burst:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self, user_id: int) -> None:
        user: User = self.users[user_id]
        try:
            answers = user.answer_sheet()
            while not self._stop.is_set():
                with self._lock:
                    if len(self.submissions) + len(self._busy) >= self.limit:
                        return
                    self._busy.add(user_id)
                try:
                    submission = user.take_assessment(answers)
                finally:
                    with self._lock:
                        self._busy.discard(user_id)
                with self._lock:
                    self.submissions.append(submission)
                    self.owners[submission.record_id] = user_id
        except BaseException as exc:  # reported by `join`
            self.failures.append(exc)
            self._stop.set()

    def count(self, *, began_after: float = 0.0) -> int:
        with self._lock:
            return sum(1 for s in self.submissions if s.began > began_after)

    def wait_for(self, count: int, *, began_after: float = 0.0, timeout: float = 180) -> None:
        """Until `count` submissions (begun after `began_after`, wall clock) were answered."""
        deadline = time.monotonic() + timeout
        while self.count(began_after=began_after) < count:
            assert not self.failures, self.failures
            assert any(t.is_alive() for t in self._threads), "the burst ended early"
            assert time.monotonic() < deadline, f"fewer than {count} submissions after {timeout} s"
            time.sleep(0.1)

    def stop(self, timeout: float = 180) -> list[Submission]:
        """Stop after each user's submission in progress; every submission made."""
        self._stop.set()
        return self.join(timeout)

    def join(self, timeout: float = 180) -> list[Submission]:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "a user is still submitting"
        assert not self.failures, self.failures
        with self._lock:
            return list(self.submissions)

    def user_of(self, record_id: int) -> User:
        return self.users[self.owners[record_id]]
