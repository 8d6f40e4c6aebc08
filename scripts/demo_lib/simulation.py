"""Simulated users: profiles that shape their answers, and the concurrent submit-and-poll run."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scripts.demo_lib.client import Api, ApiError
from services.domain.status import RecordStatus

#: Simulated users get ids from here up, apart from user 1 of `make run`'s banner.
FIRST_USER_ID = 1001
POLL_INTERVAL_S = 0.1
#: Statuses after which a record's report will not change any more.
FINISHED = frozenset({int(RecordStatus.COMPLETED), int(RecordStatus.FAILED)})

#: Profiles: how strongly a user leans to each dimension (0 weakest .. 1 strongest).
PROFILES: dict[str, dict[str, float]] = {
    "理工型": {"logical": 0.92, "spatial": 0.75, "naturalist": 0.55, "intrapersonal": 0.55, "bodily": 0.4},
    "文艺型": {"linguistic": 0.88, "musical": 0.82, "intrapersonal": 0.7, "spatial": 0.55, "logical": 0.3},
    "运动型": {"bodily": 0.93, "interpersonal": 0.72, "naturalist": 0.6, "linguistic": 0.3, "musical": 0.35},
    "社交型": {"interpersonal": 0.92, "linguistic": 0.72, "musical": 0.55, "intrapersonal": 0.35},
    "自然型": {
        "naturalist": 0.92,
        "intrapersonal": 0.66,
        "spatial": 0.6,
        "bodily": 0.55,
        "interpersonal": 0.35,
    },
    "均衡型": {},
}
#: Lean of the dimensions a profile does not name.
DEFAULT_LEAN = 0.5


@dataclass(frozen=True)
class Question:
    id: int
    dimension_code: str
    dimension_name: str
    reverse_scored: bool


@dataclass
class SimUser:
    user_id: int
    profile: str
    lean: dict[str, float]
    token: str
    records: list[int] = field(default_factory=list)

    def answers(self, questions: Sequence[Question], rng: random.Random) -> list[dict[str, int]]:
        """A plausible answer sheet: agreement follows the user's lean, with day-to-day noise;
        a reverse-scored statement ("…对我来说是件苦差事") is disagreed with by the strong."""
        sheet = []
        for q in questions:
            agreement = 1 + 4 * self.lean.get(q.dimension_code, DEFAULT_LEAN) + rng.gauss(0, 0.7)
            value = min(5, max(1, round(agreement)))
            sheet.append({"questionId": q.id, "value": 6 - value if q.reverse_scored else value})
        return sheet


def reverse_scored_ids() -> set[int]:
    """Which statements are reverse-scored (a respondent understands what they agree to).
    From the questionnaire shipped with the package; none if it cannot be read."""
    try:
        from services.domain.questionnaire import load_questionnaire

        return {q.id for d in load_questionnaire().dimensions for q in d.questions if q.reverse_scored}
    except Exception:  # the demo also works from a bare checkout: then answers are all "forward"
        return set()


def load_questions(api: Api, token: str) -> list[Question]:
    reverse = reverse_scored_ids()
    return [
        Question(int(q["id"]), q["dimensionCode"], q["dimensionName"], int(q["id"]) in reverse)
        for q in api.call("GET", "/api/assessment/questions", token)
    ]


def make_users(count: int, secret_key: str, rng: random.Random) -> list[SimUser]:
    from web.auth import issue_user_token

    names = list(PROFILES)
    start = rng.randrange(len(names))
    users = []
    for index in range(count):
        profile = names[(start + index) % len(names)]
        codes = set(PROFILES[profile]) | {code for p in PROFILES.values() for code in p}
        # Each person differs a little from their profile.
        lean = {
            code: min(1.0, max(0.0, PROFILES[profile].get(code, DEFAULT_LEAN) + rng.uniform(-0.1, 0.1)))
            for code in codes
        }
        user_id = FIRST_USER_ID + index
        users.append(SimUser(user_id, profile, lean, issue_user_token(secret_key, user_id)))
    return users


def split_records(records: int, users: int) -> list[int]:
    """How many records each user submits: as even as possible, the first users one more."""
    return [records // users + (1 if i < records % users else 0) for i in range(users)]


@dataclass
class RunState:
    """What the run has seen so far; the submitting threads and the poller share it (under `lock`)."""

    total: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    submitted_at: dict[int, float] = field(default_factory=dict)  # record id -> monotonic time
    done_at: dict[int, float] = field(default_factory=dict)
    status: dict[int, int] = field(default_factory=dict)
    server_latency: dict[int, float] = field(default_factory=dict)  # completedAt - submittedAt
    errors: list[str] = field(default_factory=list)
    submitting_took: float = 0.0

    def count(self, status: int) -> int:
        with self.lock:
            return sum(1 for s in self.status.values() if s == status)

    def submitted(self) -> int:
        with self.lock:
            return len(self.submitted_at)


def submit_records(
    api: Api, user: SimUser, count: int, questions: Sequence[Question], *, seed: int, state: RunState
) -> None:
    """One user's records, one after the other: create → start → submit."""
    rng = random.Random(seed)
    for _ in range(count):
        try:
            record = api.call("POST", "/api/assessment/createRecord", user.token)
            record_id = int(record["id"])
            api.call("POST", "/api/assessment/startAssessment", user.token, {"recordId": record_id})
            sheet = user.answers(questions, rng)
            started = time.monotonic()
            result = api.call(
                "POST", "/api/assessment/submitAnswers", user.token, {"recordId": record_id, "answers": sheet}
            )
        except ApiError as exc:
            with state.lock:
                state.errors.append(str(exc))
            continue
        with state.lock:
            user.records.append(record_id)
            state.submitted_at[record_id] = started
            state.status[record_id] = int(result["status"])


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


#: Records per page when the demo lists a user's records (the API's maximum).
RECORDS_PAGE_SIZE = 100


def user_records(api: Api, token: str, oldest: int) -> list[dict[str, Any]]:
    """The user's records down to id `oldest`, following the pages (newest first)."""
    rows: list[dict[str, Any]] = []
    path = f"/api/assessment/records?size={RECORDS_PAGE_SIZE}"
    while True:
        page = api.call("GET", path, token)
        rows.extend(page["items"])
        cursor = page["nextCursor"]
        if cursor is None or cursor <= oldest:
            return rows
        path = f"/api/assessment/records?size={RECORDS_PAGE_SIZE}&cursor={cursor}"


def poll_once(api: Api, users: Sequence[SimUser], state: RunState) -> None:
    """One round: each user's record list gives the status of all their records at once."""
    for user in users:
        with state.lock:
            pending = {r for r in user.records if state.status.get(r) not in FINISHED}
        if not pending:
            continue
        try:
            rows = user_records(api, user.token, min(pending))
        except ApiError as exc:
            with state.lock:
                state.errors.append(str(exc))
            continue
        now = time.monotonic()
        with state.lock:
            for row in rows:
                record_id = int(row["id"])
                if record_id not in pending:
                    continue
                status = int(row["status"])
                state.status[record_id] = status
                if status in FINISHED:
                    state.done_at[record_id] = now
                submitted, completed = (
                    _parse_time(row.get("submittedAt")),
                    _parse_time(row.get("completedAt")),
                )
                if status == RecordStatus.COMPLETED and submitted and completed:
                    state.server_latency[record_id] = (completed - submitted).total_seconds()


def pick_report(users: Sequence[SimUser], state: RunState) -> tuple[SimUser, int] | None:
    """The latest finished record of the first user with a marked profile (they rotate with
    the seed); a balanced profile only if there is nothing else."""
    for user in sorted(users, key=lambda u: not PROFILES[u.profile]):
        finished = [r for r in user.records if state.status.get(r) == RecordStatus.COMPLETED]
        if finished:
            return user, finished[-1]
    return None


def report_completed_at(report: dict[str, Any]) -> datetime | None:
    return _parse_time(report.get("completedAt"))
