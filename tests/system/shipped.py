"""A stack as it ships, found and used as its user finds and uses it.

`ShippedStack` starts `python -m scripts.run_stack` (what `make run` runs; `RunStack`),
finds the web in `.state/stack.json` and the credentials in `.state/secrets.json` (what
the banner prints), and talks to it over HTTP only: users create, start, autosave and
submit records; an admin signs in to the console and reads the overview; Prometheus'
scrape of `/metrics`. Every answer the web gives is recorded, so a test can say the web
answered throughout (200, or 503 with Retry-After while a server is away: never a 500,
never silence).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import RunStack, wait_until
from web import issue_user_token

USER_PATH = "/api/assessment"
#: Bounds a hang of one HTTP call; the web answers in well under it even in a failover.
HTTP_TIMEOUT_S = 30
#: How long a user keeps retrying a step answered 503 before the test fails.
USER_PATIENCE_S = 120
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
FIGURE = re.compile(r'data-figure="(\w+)">([^<]*)<')
PROCESS_ROW = re.compile(r'<tr data-process="(\w+)" data-alive="(yes|no)"')


@dataclass(frozen=True)
class Answer:
    """One HTTP exchange: when it began and ended (wall clock), what was asked and answered."""

    began: float
    ended: float
    method: str
    path: str
    status: int  # 0: no answer at all (connection refused, reset, timed out)
    retry_after: str | None = None
    error: str = ""


@dataclass(frozen=True)
class Submission:
    record_id: int
    enqueued: bool
    #: Wall clock when the successful submitAnswers call began and when it was answered.
    began: float
    answered: float


@dataclass
class Web:
    """The web process as its clients see it: every answer it gave, kept in order."""

    base_url: str
    answers: list[Answer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        session: requests.Session | None = None,
        data: dict[str, str] | None = None,
    ) -> requests.Response | None:
        """One call; None when the web gave no answer (recorded as status 0)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        route = path.split("?", maxsplit=1)[0]
        began = time.time()
        try:
            response = (session or requests).request(
                method,
                f"{self.base_url}{path}",
                headers=headers,
                json=body,
                data=data,
                timeout=HTTP_TIMEOUT_S,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            self._record(Answer(began, time.time(), method, route, 0, error=repr(exc)))
            return None
        retry_after = response.headers.get("Retry-After")
        self._record(Answer(began, time.time(), method, route, response.status_code, retry_after))
        return response

    def expect(self, status: int, method: str, path: str, **kwargs: Any) -> requests.Response:
        """One call that must be answered with `status`."""
        response = self.call(method, path, **kwargs)
        assert response is not None, f"{method} {path}: no answer"
        assert response.status_code == status, (method, path, response.status_code, response.text[:2000])
        return response

    def _record(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)

    def unanswered_or_failed(self) -> list[Answer]:
        """Every exchange that was not 2xx/3xx/4xx, nor 503 with Retry-After (a server away)."""
        with self.lock:
            answers = list(self.answers)
        return [
            a
            for a in answers
            if a.status == 0 or (a.status >= 500 and not (a.status == 503 and a.retry_after is not None))
        ]


class User:
    """A user of the mini-program, with the token the stack's SECRET_KEY signs."""

    def __init__(self, web: Web, token: str) -> None:
        self.web = web
        self.token = token

    def ok(self, method: str, path: str, body: Any = None, *, patience_s: float = USER_PATIENCE_S) -> Any:
        """The call's data; a 503 (a server away) or no answer is retried, as the app does."""
        deadline = time.monotonic() + patience_s
        while True:
            response = self.web.call(method, f"{USER_PATH}{path}", token=self.token, body=body)
            if response is not None and response.status_code != 503:
                envelope = response.json()
                assert (response.status_code, envelope["code"]) == (200, 0), (path, envelope)
                return envelope["data"]
            assert time.monotonic() < deadline, f"{method} {path} kept failing for {patience_s} s"
            time.sleep(0.2)

    def answer_sheet(self) -> list[dict[str, int]]:
        questions = self.ok("GET", "/questions")
        return [{"questionId": q["id"], "value": 1 + q["id"] % 5} for q in questions]

    def take_assessment(self, answers: list[dict[str, int]]) -> Submission:
        """Create and start a record, autosave a few answers, then submit them all."""
        record_id = int(self.ok("POST", "/createRecord")["id"])
        self.ok("POST", "/startAssessment", {"recordId": record_id})
        self.ok("POST", "/saveAnswers", {"recordId": record_id, "answers": answers[:3]})
        body = {"recordId": record_id, "answers": answers}
        deadline = time.monotonic() + USER_PATIENCE_S
        while True:
            began = time.time()
            response = self.web.call("POST", f"{USER_PATH}/submitAnswers", token=self.token, body=body)
            if response is not None and response.status_code != 503:
                envelope = response.json()
                assert (response.status_code, envelope["code"]) == (200, 0), envelope
                return Submission(record_id, bool(envelope["data"]["enqueued"]), began, time.time())
            assert time.monotonic() < deadline, "submitAnswers kept failing"
            time.sleep(0.2)

    def record(self, record_id: int) -> dict[str, Any]:
        return dict(self.ok("GET", f"/record?recordId={record_id}"))

    def report(self, record_id: int) -> dict[str, Any]:
        return dict(self.ok("GET", f"/report?recordId={record_id}"))


@dataclass(frozen=True)
class Overview:
    """The console's overview page as an admin reads it."""

    figures: dict[str, str]
    processes: list[tuple[str, bool]]  # (kind, alive)

    def alive(self, kind: str) -> int:
        return sum(1 for k, alive in self.processes if k == kind and alive)


class ShippedStack:
    """`make run` (`python -m scripts.run_stack`) in a state folder of its own, used over HTTP."""

    def __init__(self, *, env: dict[str, str], state: Path, log_path: Path) -> None:
        self.state = state
        self.run = RunStack(env=env, state=state, log_path=log_path)
        self._web: Web | None = None

    # -- where the stack is, as its user learns it -------------------------------------------

    def stack_file(self) -> dict[str, Any]:
        return dict(json.loads((self.state / "stack.json").read_text()))

    def secrets(self) -> dict[str, str]:
        return dict(json.loads((self.state / "secrets.json").read_text()))

    @property
    def web(self) -> Web:
        if self._web is None:
            self._web = Web(self.stack_file()["base_url"])
        return self._web

    @property
    def redis_url(self) -> str:
        return str(self.stack_file()["redis_url"])

    @property
    def admin_token(self) -> str:
        return self.secrets()["ADMIN_TOKENS"].split(",")[0].strip()

    def user(self, user_id: int) -> User:
        # What `flask --app web issue-user-token USER_ID` prints with the stack's SECRET_KEY.
        return User(self.web, issue_user_token(self.secrets()["SECRET_KEY"], user_id))

    def wait_ready(self, timeout: float = 150) -> None:
        """Until the stack has said where it is and its web answers /readyz 200."""

        def ready() -> bool:
            assert self.run.alive(), "make run exited:\n" + self.run.output()[-4000:]
            if not (self.state / "stack.json").exists():
                return False
            try:
                return requests.get(f"{self.web.base_url}/readyz", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        self.wait_until(ready, timeout=timeout, what="make run to serve /readyz")

    def wait_until(self, check: Callable[[], bool], *, timeout: float, what: str) -> None:
        try:
            wait_until(check, timeout=timeout, what=what, interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- make run (end) ---\n{self.run.output()[-4000:]}") from None

    # -- an admin's and Prometheus' views ------------------------------------------------------

    def console_overview(self) -> Overview:
        """Sign in to the console with the admin token (its CSRF-protected form), read /admin/."""
        session = requests.Session()
        login = self.web.expect(200, "GET", "/admin/login", session=session)
        match = CSRF.search(login.text)
        assert match, login.text[:500]
        form = {"token": self.admin_token, "name": "值班管理员", "csrf_token": match.group(1)}
        self.web.expect(302, "POST", "/admin/login", session=session, data=form)
        page = self.web.expect(200, "GET", "/admin/", session=session)
        figures = dict(FIGURE.findall(page.text))
        assert figures, "the overview shows no queue figures:\n" + page.text[:2000]
        processes = [(kind, alive == "yes") for kind, alive in PROCESS_ROW.findall(page.text)]
        return Overview(figures, processes)

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """`GET /metrics` with the admin token, as samples by (name, labels)."""
        response = self.web.expect(200, "GET", "/metrics", token=self.admin_token)
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    def queue_stats(self) -> dict[str, int]:
        """`GET /api/admin/queue/stats`: the report queue's figures."""
        response = self.web.expect(200, "GET", "/api/admin/queue/stats", token=self.admin_token)
        return dict(response.json()["data"])

    def records_in_status(self, status: int) -> int:
        """How many live records are in `status`, as the admin's record list counts them."""
        path = f"/api/admin/assessmentRecord/list?status={status}&pageSize=1"
        response = self.web.expect(200, "GET", path, token=self.admin_token)
        return int(response.json()["data"]["total"])

    def record_events(self, record_id: int) -> list[str]:
        """The types of a record's events in the event log (`GET /api/admin/assessmentRecord/events`),
        oldest first: what the hot path's event consumer has moved from Redis to PostgreSQL."""
        path = f"/api/admin/assessmentRecord/events?id={record_id}&pageSize=100"
        response = self.web.expect(200, "GET", path, token=self.admin_token)
        return [str(item["eventType"]) for item in response.json()["data"]["items"]]

    def log(self, process_type: str) -> Path:
        """A Procfile type's output, as supervisord keeps it (`.state/logs/TYPE.log`)."""
        return self.state / "logs" / f"{process_type}.log"

    def stop(self) -> None:
        self.run.stop()
        assert self.run.pids() == [], "processes of the stack outlived make run"
