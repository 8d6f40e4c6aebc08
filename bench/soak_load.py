"""The soak's workload, over HTTP only, as the mini-program's users and an admin make it.

Users (threads, each with a seeded random source) take assessments: create, start, two
autosaves of distinct questions, then submit all 40 answers; some leave after autosaving
(their autosaves are checked at the end); a share of the submitted records is first put
in the fault drill (`POST /api/admin/drill/start`, 2 or 4 minutes: every attempt fails, so the
10/30/60 s retries and a dead letter happen). An admin regenerates: one failed record,
a batch (failed and finished ones, the latter skipped), every failed record whose drill
is over (regenerateMatching), and now and then a drilled record still in its retries
(two jobs of one record at once).

A call answered 503, or not answered, is retried as the app does; a submission whose
answer was lost and whose retry is refused with 2005 (the record is already submitted)
was accepted: its commit happened.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from bench.soak_check import Accepted
from web.auth import issue_user_token

HTTP_TIMEOUT_S = 30
PATIENCE_S = 240
#: A drilled record's chain: attempts at 0, 10, 40, 100 s (later under faults). Half the
#: drills last 2 minutes (the last attempts, delayed by faults, come after the drill and
#: generate), half 4 (the chain ends in a dead letter and status 5).
DRILL_MINUTES = (2, 4)
#: How long after its submission a drilled record surely is out of its drill.
DRILL_SETTLES_S = max(DRILL_MINUTES) * 60 + 10
#: Records are drilled in the first minute of any run, and up to DRILL_SETTLES_S before its end.
DRILL_AT_LEAST_S = 60.0
WRONG_STATUS = 2005
FIRST_USER = 7001


class GaveUp(Exception):
    pass


@dataclass
class Load:
    base_url: str
    secret_key: str
    admin_token: str
    seed: int
    users: int = 8
    drill_share: float = 0.15
    abandon_share: float = 0.1
    accepted: list[Accepted] = field(default_factory=list)
    #: Submissions answered 503 whose retry found the record already submitted (the commit had
    #: landed, its reply lost): accepted as lost answers, listed in the report.
    refused_then_submitted: list[int] = field(default_factory=list)
    autosaves: dict[int, tuple[int, dict[int, int]]] = field(default_factory=dict)  # record -> (user, acked)
    drilled: dict[int, float] = field(default_factory=dict)  # record -> drill end (wall clock)
    regenerated_in_flight: set[int] = field(default_factory=set)
    statuses: dict[int, int] = field(default_factory=dict)  # HTTP status -> count
    admin_actions: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    drill_until_s: float = 0.0  # no new drilled record after this much of the run

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- HTTP ------------------------------------------------------------------------------

    def call(self, method: str, path: str, token: str, body: Any = None) -> requests.Response | None:
        try:
            response = requests.request(
                method,
                f"{self.base_url}{path}",
                headers={"Authorization": f"Bearer {token}"},
                json=body,
                timeout=HTTP_TIMEOUT_S,
            )
        except requests.RequestException:
            self._count(0)
            return None
        self._count(response.status_code)
        return response

    def _count(self, status: int) -> None:
        with self._lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def ok(self, method: str, path: str, token: str, body: Any = None, tally: list[int] | None = None) -> Any:
        """The call's data; 503 and no answer retried; anything else but 200 raises. Each call
        made is counted in `tally` when given."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            if tally is not None:
                tally.append(1)
            response = self.call(method, path, token, body)
            if response is not None and response.status_code not in (502, 503):
                envelope = response.json()
                if response.status_code != 200 or envelope.get("code") != 0:
                    raise GaveUp(f"{method} {path}: {response.status_code} {envelope}")
                return envelope.get("data")
            if time.monotonic() > deadline:
                raise GaveUp(f"{method} {path}: no answer for {PATIENCE_S} s")
            time.sleep(0.3)

    # -- users -----------------------------------------------------------------------------

    def start(self, began: float, seconds: float) -> None:
        self.drill_until_s = min(seconds, max(DRILL_AT_LEAST_S, seconds - DRILL_SETTLES_S))
        for n in range(self.users):
            user_id = FIRST_USER + n
            thread = threading.Thread(target=self._user, args=(user_id, began), daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._admin, args=(began,), daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = PATIENCE_S + 30) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))

    def _user(self, user_id: int, began: float) -> None:
        rng = random.Random(self.seed * 1000 + user_id)
        token = issue_user_token(self.secret_key, user_id)
        try:
            questions = [int(q["id"]) for q in self.ok("GET", "/api/assessment/questions", token)]
            while not self._stop.is_set():
                self._assessment(rng, token, user_id, questions, began)
        except GaveUp as exc:
            with self._lock:
                self.errors.append(f"user {user_id}: {exc}")

    def _assessment(
        self, rng: random.Random, token: str, user_id: int, questions: list[int], began: float
    ) -> None:
        answers = {q: rng.randint(1, 5) for q in questions}
        record_id = int(self.ok("POST", "/api/assessment/createRecord", token)["id"])
        starts: list[int] = []
        self.ok("POST", "/api/assessment/startAssessment", token, {"recordId": record_id}, starts)
        acked: dict[int, int] = {}
        for chunk in (questions[:5], questions[5:10]):
            body = {"recordId": record_id, "answers": [{"questionId": q, "value": answers[q]} for q in chunk]}
            response = self.call("POST", "/api/assessment/saveAnswers", token, body)
            if response is not None and response.status_code == 200 and response.json().get("code") == 0:
                acked.update({q: answers[q] for q in chunk})
        if rng.random() < self.abandon_share:
            with self._lock:
                self.autosaves[record_id] = (user_id, acked)
            return
        drilled = rng.random() < self.drill_share and time.time() - began < self.drill_until_s
        if drilled:
            minutes = rng.choice(DRILL_MINUTES)
            self.ok(
                "POST", "/api/admin/drill/start", self.admin_token, {"ids": [record_id], "minutes": minutes}
            )
            with self._lock:
                self.drilled[record_id] = time.time() + minutes * 60
        body = {"recordId": record_id, "answers": [{"questionId": q, "value": v} for q, v in answers.items()]}
        unanswered = False
        refused_after_commit = False
        deadline = time.monotonic() + PATIENCE_S
        while True:
            response = self.call("POST", "/api/assessment/submitAnswers", token, body)
            if response is not None and response.status_code not in (502, 503):
                envelope = response.json()
                if response.status_code == 200 and envelope.get("code") == 0:
                    break
                if unanswered and envelope.get("code") == WRONG_STATUS:
                    break  # the lost answer's commit happened: accepted
                if refused_after_commit and envelope.get("code") == WRONG_STATUS:
                    # A 503 whose COMMIT landed with its reply lost (PostgreSQL cut off at that
                    # moment): the web could not know. Accepted like a lost answer, counted apart.
                    with self._lock:
                        self.refused_then_submitted.append(record_id)
                    unanswered = True
                    break
                raise GaveUp(f"submitAnswers: {response.status_code} {envelope}")
            unanswered = unanswered or response is None
            refused_after_commit = response is not None and response.status_code == 503
            if time.monotonic() > deadline:
                raise GaveUp("submitAnswers: no answer")
            time.sleep(0.3)
        with self._lock:
            self.accepted.append(
                Accepted(
                    record_id, answers, drilled, time.time(), answered=not unanswered, starts=len(starts)
                )
            )

    # -- the admin -------------------------------------------------------------------------

    def _admin(self, began: float) -> None:
        rng = random.Random(self.seed * 1000)
        while not self._stop.wait(rng.uniform(3.0, 8.0)):
            action = rng.choice(("single", "batch", "matching", "in_flight"))
            try:
                self._admin_action(rng, action)
            except GaveUp as exc:
                with self._lock:
                    self.errors.append(f"admin {action}: {exc}")

    def _failed_records(self, limit: int = 50) -> list[int]:
        data = self.ok("GET", f"/api/admin/assessmentRecord/list?status=5&pageSize={limit}", self.admin_token)
        now = time.time()
        with self._lock:
            over = {r for r, until in self.drilled.items() if until < now}
        return [int(item["id"]) for item in data["items"] if int(item["id"]) in over]

    def _admin_action(self, rng: random.Random, action: str) -> None:
        path = "/api/admin/assessmentRecord/"
        token = self.admin_token
        if action == "single":
            failed = self._failed_records()
            if not failed:
                return
            self._admin_call(action, f"{path}regenerateReport", {"id": rng.choice(failed)})
        elif action == "batch":
            failed = self._failed_records()
            with self._lock:
                done = [s.record_id for s in rng.sample(self.accepted, min(3, len(self.accepted)))]
            ids = sorted(set(failed[:5] + done))
            if ids:
                self._admin_call(action, f"{path}batchRegenerateReport", {"ids": ids})
        elif action == "matching":
            # Only records whose drill is surely over: else they would fail again, for minutes.
            until = datetime.fromtimestamp(time.time() - DRILL_SETTLES_S, UTC).isoformat(timespec="seconds")
            self._admin_call(action, f"{path}regenerateMatching", {"status": 5, "submittedTo": until})
        else:
            data = self.ok("GET", f"{path}list?status=3&pageSize=50", token)
            with self._lock:
                candidates = [int(i["id"]) for i in data["items"] if int(i["id"]) in self.drilled]
                candidates = [r for r in candidates if r not in self.regenerated_in_flight]
            if candidates:
                record_id = rng.choice(candidates)
                with self._lock:  # before the call: its answer may be lost after it acted
                    self.regenerated_in_flight.add(record_id)
                self._admin_call(action, f"{path}regenerateReport", {"id": record_id})

    def _admin_call(self, action: str, path: str, body: Any) -> bool:
        response = self.call("POST", path, self.admin_token, body)
        done = response is not None and response.status_code in (200, 202)
        with self._lock:
            key = f"{action}:{'ok' if done else (response.status_code if response is not None else 0)}"
            self.admin_actions[key] = self.admin_actions.get(key, 0) + 1
        return done
