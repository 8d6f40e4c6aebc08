"""The attacks of docs/security.md, each against the Procfile's web line under gunicorn on the real
PostgreSQL and Redis (no worker: records stay where the web tier puts them).

Each test is an attack as an outsider makes it, over HTTP, and what the product must answer:
invented methods do not grow /metrics; a name the audit cannot hold does not sign in; 60
concurrent guesses are each counted; strangers at the admins' address do not lock out an
admin's browser; a cookie copied before sign-out opens nothing after it; the access log
does not keep a signed report link; a 413 closes its connection cleanly; console inputs
never answer 500; the Host header builds no URL; console answers carry their security
headers; one odd Redis entry does not break /healthz/workers or a task's API;
regenerateMatching runs one task per filter, caps the rest and refuses a NUL.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import requests
from sqlalchemy import Engine, text

from bench import launch
from bench.web_edge import procfile_web_line, start_web
from config.settings import Settings
from observability.liveness import BEATS_KEY
from redis_adapters.keyspace import Keyspace
from tests.support.records import clear_records
from tests.support.redis_keys import clean_redis
from tests.support.stack import reset
from web.console.limits import FREE_ATTEMPTS, MAX_WAIT_MS
from web.http_metrics import METHODS, OTHER
from web.report_page import sign_report_link

pytestmark = [pytest.mark.e2e]

ADMIN_TOKEN = "security-admin-token-0123456789abcdef"
SECRET_KEY = "security-secret-key-0123456789abcdef0"
USER_ID = 4242
TIMEOUT_S = 20.0
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
KEYS = Keyspace.of()


@dataclass
class Web:
    port: int
    service: launch.Service

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def web(
    engine: Engine,
    redis_url: str,
    redis_conn: redis.Redis,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Web]:
    reset(engine, redis_conn)
    env = {
        **launch.stack_env(redis_url, settings.database_url),
        "SECRET_KEY": SECRET_KEY,
        "ADMIN_TOKENS": ADMIN_TOKEN,
        "WEB_CONCURRENCY": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("metrics")),
    }
    service, port = start_web(procfile_web_line(), env)
    try:
        yield Web(port, service)
    finally:
        service.stop()
        reset(engine, redis_conn)


@pytest.fixture
def clean(web: Web, redis_conn: redis.Redis, engine: Engine) -> Web:
    """No sign-in counts, sessions or tasks of an earlier test; no records or events."""
    clean_redis(redis_conn)
    clear_records(engine)
    return web


class Console:
    """A browser without JavaScript: requests' cookie jar, the console's forms."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.http = requests.Session()

    def csrf(self, path: str = "/admin/login") -> str:
        match = CSRF.search(self.http.get(self.web.url(path), timeout=TIMEOUT_S).text)
        assert match, path
        return match.group(1)

    def post_sign_in(self, csrf: str, token: str = ADMIN_TOKEN, name: str = "值班") -> requests.Response:
        return self.http.post(
            self.web.url("/admin/login"),
            data={"token": token, "name": name, "csrf_token": csrf},
            allow_redirects=False,
            timeout=TIMEOUT_S,
        )

    def sign_in(self, token: str = ADMIN_TOKEN, name: str = "值班") -> requests.Response:
        return self.post_sign_in(self.csrf(), token, name)

    def sign_out(self) -> None:
        response = self.http.post(
            self.web.url("/admin/logout"),
            data={"csrf_token": self.csrf("/admin/")},
            allow_redirects=False,
            timeout=TIMEOUT_S,
        )
        assert response.status_code == 302

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.http.get(self.web.url(path), allow_redirects=False, timeout=TIMEOUT_S, **kwargs)


def user_headers() -> dict[str, str]:
    from web import issue_user_token

    return {"Authorization": f"Bearer {issue_user_token(SECRET_KEY, USER_ID)}"}


def submitted_record(web: Web) -> int:
    """A record created, started and submitted over the user API (status 3: no worker runs)."""
    headers = user_headers()

    def data(response: requests.Response) -> Any:
        envelope = response.json()
        assert envelope["code"] == 0, envelope
        return envelope["data"]

    base = "/api/assessment"
    record_id = int(
        data(requests.post(web.url(f"{base}/createRecord"), headers=headers, timeout=TIMEOUT_S))["id"]
    )
    body = {"recordId": record_id}
    data(requests.post(web.url(f"{base}/startAssessment"), json=body, headers=headers, timeout=TIMEOUT_S))
    questions = data(requests.get(web.url(f"{base}/questions"), headers=headers, timeout=TIMEOUT_S))
    answers = [{"questionId": q["id"], "value": 3} for q in questions]
    data(
        requests.post(
            web.url(f"{base}/submitAnswers"),
            json={"recordId": record_id, "answers": answers},
            headers=headers,
            timeout=TIMEOUT_S,
        )
    )
    return record_id


# -- 1. /metrics -----------------------------------------------------------------------------


def test_invented_methods_add_no_series_to_metrics(clean: Web) -> None:
    for i in range(30):
        requests.request(f"ZQ{i}", clean.url("/healthz"), timeout=TIMEOUT_S)
    scrape = requests.get(clean.url("/metrics"), headers=clean.admin(), timeout=TIMEOUT_S)
    assert scrape.status_code == 200
    methods = set(re.findall(r'^http_request[^{]*\{[^}]*method="([^"]*)"', scrape.text, re.MULTILINE))
    assert OTHER in methods  # the invented ones were counted, under one value
    assert methods <= METHODS | {OTHER}
    assert "ZQ" not in scrape.text


# -- 2, 9. names at sign-in -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["nul\x00name", "evil\u202egnp.exe", "\x1b[31mred", "bell\x07", "zero\u200bwidth", "x" * 33],
    ids=["NUL", "RLO", "ESC", "BEL", "ZWSP", "33-chars"],
)
def test_a_name_the_audit_cannot_hold_does_not_sign_in(
    clean: Web, redis_conn: redis.Redis, name: str
) -> None:
    console = Console(clean)
    response = console.sign_in(name=name)
    assert response.status_code == 400
    assert "称呼" in response.text
    assert console.get("/admin/").status_code == 302  # not signed in
    assert redis_conn.keys(KEYS.console.session("*")) == []


def test_an_admin_action_is_audited_with_the_name_given(clean: Web, engine: Engine) -> None:
    record_id = submitted_record(clean)
    console = Console(clean)
    assert console.sign_in(name="王 五").status_code == 302
    csrf = console.csrf("/admin/records")
    answer = console.http.post(
        clean.url(f"/admin/records/{record_id}/regenerate"),
        data={"csrf_token": csrf},
        allow_redirects=False,
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 302
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT actor, data->>'outcome' FROM event_log WHERE event_type = 'admin.regenerate'")
        ).all()
    assert ("console:王 五", "ok") in [tuple(row) for row in rows]


# -- 3. the sign-in limit ---------------------------------------------------------------------


def test_concurrent_guesses_are_each_counted_before_any_is_evaluated(clean: Web) -> None:
    consoles = [Console(clean) for _ in range(60)]
    tokens = [console.csrf() for console in consoles]
    barrier = threading.Barrier(len(consoles))

    def guess(i: int) -> requests.Response:
        barrier.wait(timeout=TIMEOUT_S)
        return consoles[i].post_sign_in(tokens[i], token=f"guess-{i}")

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(consoles)) as pool:
        answers = list(pool.map(guess, range(len(consoles))))
    elapsed = time.monotonic() - started
    evaluated = [a for a in answers if a.status_code == 401]
    refused = [a for a in answers if a.status_code == 429]
    assert len(evaluated) + len(refused) == len(answers), [a.status_code for a in answers]
    # The waits after the free attempts are 1, 2, 4 ... s: within `elapsed` at most
    # log2(elapsed + 1) more attempts can have been admitted.
    assert len(evaluated) <= FREE_ATTEMPTS + math.floor(math.log2(elapsed + 1))
    assert all(0 < int(a.headers["Retry-After"]) <= MAX_WAIT_MS // 1000 for a in refused)


def test_strangers_at_the_admins_address_do_not_lock_out_an_admins_browser(clean: Web) -> None:
    admin = Console(clean)
    assert admin.sign_in().status_code == 302
    admin.sign_out()
    stranger = Console(clean)
    answers = [stranger.sign_in(token=f"guess-{i}") for i in range(15)]
    codes = [answer.status_code for answer in answers]
    assert 429 in codes  # the address is slowed down
    assert codes.count(401) <= FREE_ATTEMPTS + 2
    # A wrong token waits at most MAX_WAIT_MS: never a lock-out.
    assert all(int(a.headers["Retry-After"]) <= MAX_WAIT_MS // 1000 for a in answers if a.status_code == 429)
    assert admin.sign_in().status_code == 302  # the admin is not slowed down
    assert admin.get("/admin/").status_code == 200
    # Nor is a browser that never signed in: the right token is never made to wait.
    assert Console(clean).sign_in().status_code == 302


# -- 4. sessions end at sign-out ---------------------------------------------------------------


def test_a_cookie_copied_before_sign_out_opens_nothing_after_it(clean: Web) -> None:
    record_id = submitted_record(clean)
    admin = Console(clean)
    assert admin.sign_in().status_code == 302
    csrf = admin.csrf("/admin/records")
    thief = requests.Session()
    thief.cookies.update(admin.http.cookies)
    assert thief.get(clean.url("/admin/"), allow_redirects=False, timeout=TIMEOUT_S).status_code == 200
    admin.sign_out()
    page = thief.get(clean.url("/admin/records"), allow_redirects=False, timeout=TIMEOUT_S)
    assert page.status_code == 302
    assert page.headers["Location"].startswith("/admin/login")
    form = thief.post(
        clean.url(f"/admin/records/{record_id}/regenerate"),
        data={"csrf_token": csrf},
        allow_redirects=False,
        timeout=TIMEOUT_S,
    )
    assert form.status_code == 401


# -- 5. the access log -------------------------------------------------------------------------


def logged(web: Web, marker: str) -> str:
    """The web's output once `marker` is in it (the access line is written after the answer)."""
    deadline = time.monotonic() + TIMEOUT_S
    while marker not in web.service.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    output = web.service.output()
    assert marker in output
    return output


def test_the_access_log_keeps_no_signed_report_link(clean: Web) -> None:
    record_id = submitted_record(clean)
    signature = sign_report_link(SECRET_KEY, USER_ID, record_id)
    page = requests.get(clean.url(f"/reports/{record_id}"), params={"s": signature}, timeout=TIMEOUT_S)
    assert page.status_code == 409  # the owner's link, to a report not generated yet
    output = logged(clean, f"/reports/{record_id}?s=REDACTED")
    assert signature not in output
    assert signature.split(".")[-1] not in output


# -- 6. 413 ------------------------------------------------------------------------------------


def test_a_413_says_close_and_the_next_request_gets_a_fresh_connection(clean: Web) -> None:
    http = requests.Session()
    body = json.dumps({"id": 1, "pad": "x" * 1_000_000})
    answer = http.post(
        clean.url("/api/admin/assessmentRecord/regenerateReport"),
        data=body,
        headers={**clean.admin(), "Content-Type": "application/json"},
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 413
    assert answer.headers["Connection"].lower() == "close"
    assert answer.json()["code"] == 413
    assert http.get(clean.url("/healthz"), timeout=TIMEOUT_S).status_code == 200


def test_a_5_mb_body_gets_its_413_not_a_reset(clean: Web) -> None:
    for _ in range(3):
        answer = requests.post(
            clean.url("/api/admin/assessmentRecord/regenerateReport"),
            data=b"{" + b" " * 5_000_000 + b"}",
            headers={**clean.admin(), "Content-Type": "application/json"},
            timeout=TIMEOUT_S,
        )
        assert answer.status_code == 413
        assert answer.json()["code"] == 413


def test_a_413_connection_is_closed_after_the_answer(clean: Web) -> None:
    """Raw: a second request pipelined behind the refused body is never answered."""
    body = b"x" * 200_000
    request = (
        b"POST /api/admin/assessmentRecord/regenerateReport HTTP/1.1\r\nHost: t\r\n"
        + f"Authorization: Bearer {ADMIN_TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
        + b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", clean.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 413")
    assert data.count(b"HTTP/1.1 ") == 1
    assert b"Connection: close" in data


# -- 7, 10. console input, headers, Host -------------------------------------------------------


CONSOLE_PROBES = [
    "/admin/records?to=9999-12-31",
    "/admin/records?from=0001-01-01&to=0001-01-01",
    "/admin/audit?to=9999-12-31",
    "/admin/audit?from=0001-01-01",
    "/admin/audit?actor=%00",
    "/admin/audit?action=%1b%5b31m",
    "/admin/dead?endpoint=x",
    "/admin/invalid?_method=POST",
    "/admin/invalid?_external=1&_scheme=javascript&_anchor=x&endpoint=y",
    "/admin/?refresh=%C2%B2",
    "/admin/records/99999999999999999999",
    "/admin/tasks/..%2f..%2fx",
    "/admin/login?next=%0d%0aSet-Cookie:%20x=1",
    "/admin/login?next=/admin/%0d%0aX:%201",
    "/admin/nope",
]


def test_console_inputs_never_answer_500(clean: Web, redis_conn: redis.Redis) -> None:
    redis_conn.lpush(KEYS.report.invalid, *[f"garbage {i}".encode() for i in range(60)])
    console = Console(clean)
    assert console.sign_in().status_code == 302
    for path in CONSOLE_PROBES:
        answer = console.get(path)
        assert answer.status_code < 500, (path, answer.status_code, answer.text[:300])
        location = answer.headers.get("Location", "")
        assert "\r" not in location
        assert "\n" not in location
    paged = console.get("/admin/invalid?_external=1&endpoint=y&_method=POST").text
    assert 'href="/admin/invalid?page=2"' in paged  # relative, and only its own key
    assert console.get("/admin/audit?actor=%00").status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/admin/login",
        "/admin/",
        "/admin/records",
        "/admin/dead",
        "/admin/invalid",
        "/admin/audit",
        "/admin/nope",
    ],
)
def test_every_console_answer_carries_the_security_headers(clean: Web, path: str) -> None:
    console = Console(clean)
    assert console.sign_in().status_code == 302
    answer = console.get(path)
    headers = answer.headers
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert "no-store" in headers["Cache-Control"]


def test_the_host_header_builds_no_url(clean: Web) -> None:
    answer = requests.get(
        clean.url("/admin"), headers={"Host": "evil.example"}, allow_redirects=False, timeout=TIMEOUT_S
    )
    assert answer.status_code in (301, 302, 308)
    assert answer.headers["Location"] == "/admin/"
    console = Console(clean)
    assert console.sign_in().status_code == 302
    page = console.get("/admin/audit?_external=1", headers={"Host": "evil.example"})
    assert "evil.example" not in page.text


# -- 8. one odd Redis entry: anonymous and API views --------------------------------------------


def test_an_odd_heartbeat_does_not_break_the_anonymous_health_check(
    clean: Web, redis_conn: redis.Redis
) -> None:
    odd = {
        "kind": "worker",
        "host": "h",
        "pid": 1,
        "version": "x",
        "started_at": 0,
        "last_seen": 1e300,
        "doing": "x",
    }
    redis_conn.hset(BEATS_KEY, "worker:h:1", json.dumps(odd))
    redis_conn.hset(BEATS_KEY, "worker:h:2", b"\xff not json")
    answer = requests.get(clean.url("/healthz/workers"), timeout=TIMEOUT_S)
    assert answer.status_code in (200, 503)
    assert answer.json()["code"] in (0, 5003)


def test_an_unreadable_task_is_shown_as_such_by_the_api(clean: Web, redis_conn: redis.Redis) -> None:
    strange, wrong_type = "a" * 32, "b" * 32
    redis_conn.hset(
        KEYS.task_prefix + strange, mapping={"state": "paused", "status": 5, "matched": 1, "maxId": 1}
    )
    redis_conn.set(KEYS.task_prefix + wrong_type, "not a hash")
    for task_id in (strange, wrong_type):
        answer = requests.get(
            clean.url(f"/api/admin/tasks/{task_id}"), headers=clean.admin(), timeout=TIMEOUT_S
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["data"]["state"] == "unreadable"


# -- 11. regenerateMatching -------------------------------------------------------------------


MATCHING = "/api/admin/assessmentRecord/regenerateMatching"


def test_concurrent_calls_with_one_filter_start_one_task(clean: Web, redis_conn: redis.Redis) -> None:
    for _ in range(3):
        submitted_record(clean)

    def call(_: int) -> requests.Response:
        return requests.post(
            clean.url(MATCHING), json={"status": 3}, headers=clean.admin(), timeout=TIMEOUT_S
        )

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(call, range(20)))
    started = [a for a in answers if a.status_code == 202]
    assert len(started) == 1, [a.status_code for a in answers]
    task_id = started[0].json()["data"]["taskId"]
    refused = [a for a in answers if a.status_code != 202]
    assert {a.status_code for a in refused} == {409}
    assert all(task_id in a.json()["message"] for a in refused)
    assert redis_conn.llen(KEYS.admin.queue) == 1  # one message for the worker


def test_tasks_waiting_are_capped(clean: Web) -> None:
    from redis_adapters.task_store import MAX_ACTIVE_TASKS

    codes = [
        requests.post(
            clean.url(MATCHING), json={"status": 5, "userId": user}, headers=clean.admin(), timeout=TIMEOUT_S
        ).status_code
        for user in range(1, MAX_ACTIVE_TASKS + 3)
    ]
    assert codes == [202] * MAX_ACTIVE_TASKS + [409, 409]


@pytest.mark.parametrize(
    "value", ["2025-01-01T00:00:00\u0000", "2025-01-01 ", "2025-01-01\n", "２０２５-01-01"]
)
def test_a_filter_time_with_anything_after_it_is_refused(clean: Web, value: str) -> None:
    answer = requests.post(
        clean.url(MATCHING),
        json={"status": 5, "submittedFrom": value},
        headers=clean.admin(),
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == 1001


# -- 8. one odd Redis entry each, every console page in Chromium ---------------------------------


def plant_odd_entries(client: redis.Redis) -> dict[str, str]:
    """What an attacker with Redis access, or a bug, could leave: one odd entry of each kind
    the console reads. Returns the ids of the odd tasks."""
    now_ms = int(time.time() * 1000)
    job = json.dumps({"RecordId": 7, "RetryCount": 1, "EnqueueTime": "2025-01-15T10:30:00"})
    delayed: dict[bytes, float] = {
        f"0000000000000001|{job}".encode(): 1e20,
        b"\xff\xfe not a job": now_ms + 10_000,
    }
    client.zadd(KEYS.report.delayed, delayed)
    client.zadd(KEYS.report.delayed, {"0000000000000002|x": float("inf")})
    # The oldest waiting job (the consumer's end) dated at the edge of the calendar.
    client.rpush(
        KEYS.report.queue, json.dumps({"RecordId": 8, "RetryCount": 0, "EnqueueTime": "0001-01-01T00:00:00"})
    )
    beats: dict[str, str | bytes] = {
        "worker:odd:1": json.dumps(
            {
                "kind": "worker",
                "host": "odd",
                "pid": 1,
                "version": "x",
                "started_at": 0,
                "last_seen": 1e300,
                "doing": "x",
            }
        ),
        "worker:odd:2": json.dumps(
            {
                "kind": "worker",
                "host": "odd",
                "pid": "abc",
                "version": "x",
                "started_at": -1e300,
                "last_seen": 1,
                "doing": "x",
            }
        ),
        "hotpath:odd:3": "[1, 2, 3]",
        "hotpath:odd:4": b"\xff not json",
    }
    for field, value in beats.items():
        client.hset(BEATS_KEY, field, value)
    minute = int(time.time() // 60) * 60
    client.hset(f"throughput:{minute}", mapping={"processed": "abc", "failed": "1e400", "dead": "-5"})
    dead = [
        {
            "RecordId": 5,
            "RetryCount": 3,
            "EnqueueTime": "2025-01-15T10:30:00",
            "DeadAt": "9999-12-31T23:59:59-14:00",
            "LastError": "late",
            "Attempts": 4,
        },
        {
            "RecordId": 6,
            "RetryCount": 3,
            "EnqueueTime": "2025-01-15T10:30:00",
            "DeadAt": "0001-01-01T00:00:00+14:00",
            "LastError": "early",
            "Attempts": 10**30,
        },
        {"RecordId": 2**70, "RetryCount": 3, "EnqueueTime": "x"},
    ]
    client.lpush(
        KEYS.report.dead, *[json.dumps(d) for d in dead], b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000
    )
    client.lpush(KEYS.report.invalid, b"\x00\x1b[31m\xff", "\u202eevil".encode())
    odd = {"state": "a" * 32, "type": "b" * 32, "numbers": "c" * 32}
    client.hset(
        KEYS.task_prefix + odd["state"], mapping={"state": "paused", "status": 5, "matched": 1, "maxId": 1}
    )
    client.set(KEYS.task_prefix + odd["type"], "not a hash")
    client.hset(
        KEYS.task_prefix + odd["numbers"],
        mapping={
            "state": "running",
            "status": 5,
            "matched": "many",
            "maxId": 1,
            "createdAt": "9999-12-31T23:59:59-14:00",
        },
    )
    return odd


def test_every_console_page_renders_with_every_odd_redis_entry(
    clean: Web, redis_conn: redis.Redis, page: Any
) -> None:
    from playwright.sync_api import expect

    from tests.support.browser import screenshot

    # The well-formed data around them, made as the product makes it: submissions over
    # HTTP, a regeneration task through the API, an audited action of the console.
    record_id = submitted_record(clean)
    task = requests.post(clean.url(MATCHING), json={"status": 3}, headers=clean.admin(), timeout=TIMEOUT_S)
    assert task.status_code == 202
    odd = plant_odd_entries(redis_conn)

    page.goto(clean.url("/admin/"))
    page.get_by_label("您的称呼").fill("夜班")
    page.get_by_label("管理员凭证").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="登录").click()
    expect(page.locator("header .who")).to_contain_text("夜班")
    page.goto(clean.url(f"/admin/records/{record_id}"))
    page.get_by_role("button", name="重新生成报告").first.click()  # audited, through the console
    pages = {
        "overview": "/admin/",
        "records": "/admin/records",
        "record": f"/admin/records/{record_id}",
        "dead": "/admin/dead",
        "invalid": "/admin/invalid",
        "audit": "/admin/audit",
        "task": f"/admin/tasks/{task.json()['data']['taskId']}",
        "task-odd-state": f"/admin/tasks/{odd['state']}",
        "task-wrong-type": f"/admin/tasks/{odd['type']}",
        "task-odd-numbers": f"/admin/tasks/{odd['numbers']}",
    }
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    for name, path in pages.items():
        response = page.goto(clean.url(path))
        assert response is not None
        assert response.status == 200, (name, response.status)
        expect(page.locator("main h1").first).to_be_visible()
        screenshot(page, f"console-odd-{name}")
    page.goto(clean.url("/admin/"))
    expect(page.locator("[data-unreadable-beats]")).to_have_attribute("data-unreadable-beats", "4")
    page.goto(clean.url("/admin/dead"))
    expect(page.locator("tbody tr")).to_have_count(5)  # every dead letter listed, the odd ones too
    page.goto(clean.url(f"/admin/tasks/{odd['type']}"))
    expect(page.locator(".summary")).to_contain_text("无法读取")
    page.goto(clean.url("/admin/audit"))
    expect(page.locator("main")).to_contain_text("管理后台 · 夜班")  # console:夜班, in words
    assert errors == []  # no script error (the CSP let the console's own script run)


# -- the attacks of a second review: the sign-in, bodies, links, origins -----------------------


def test_a_right_token_signs_in_at_its_first_try_while_a_guesser_posts_every_100_ms(clean: Web) -> None:
    guesser = Console(clean)
    csrf = guesser.csrf()
    answers: list[int] = []
    stop = threading.Event()

    def guess() -> None:
        i = 0
        while not stop.is_set():
            answers.append(guesser.post_sign_in(csrf, token=f"guess-{i}").status_code)
            i += 1
            stop.wait(0.1)

    thread = threading.Thread(target=guess)
    thread.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while answers.count(429) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert answers.count(429) >= 3  # the guesser is being refused
        for _ in range(3):
            fresh = Console(clean)
            assert fresh.sign_in().status_code == 302  # at its first try
            assert fresh.get("/admin/").status_code == 200
    finally:
        stop.set()
        thread.join(timeout=TIMEOUT_S)
    assert answers.count(401) <= FREE_ATTEMPTS + 1


def test_good_sign_ins_never_count_so_a_mistyped_token_is_a_plain_401(clean: Web) -> None:
    for _ in range(12):
        assert Console(clean).sign_in().status_code == 302
    mistyped = Console(clean).sign_in(token=ADMIN_TOKEN + "x")
    assert mistyped.status_code == 401
    assert "登录尝试过于频繁" not in mistyped.text


def test_a_console_post_with_a_cross_site_origin_is_refused(clean: Web) -> None:
    console = Console(clean)
    assert console.sign_in().status_code == 302
    answer = console.http.post(
        clean.url("/admin/logout"),
        data={"csrf_token": console.csrf("/admin/")},
        headers={"Origin": "http://evil.example"},
        allow_redirects=False,
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 403
    assert console.get("/admin/").status_code == 200  # still signed in


def test_a_percent_encoded_signature_parameter_is_redacted_too(clean: Web) -> None:
    record_id = submitted_record(clean)
    signature = sign_report_link(SECRET_KEY, USER_ID, record_id)
    # Raw: an HTTP library would normalise "%73" to "s" before sending it.
    page = raw_exchange(
        clean.port,
        f"GET /reports/{record_id}?%73={signature} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode(),
    )
    assert page.startswith(b"HTTP/1.1 409")  # Werkzeug read it as `s`: the owner's link, report not ready
    output = logged(clean, f"/reports/{record_id}?%73=REDACTED")
    assert signature.split(".")[-1] not in output


def test_a_report_link_with_a_non_integer_record_id_is_refused(clean: Web) -> None:
    from itsdangerous import URLSafeTimedSerializer

    from web.report_page import LINK_SALT

    record_id = submitted_record(clean)
    forged = URLSafeTimedSerializer(SECRET_KEY, salt=LINK_SALT).dumps(
        {"uid": USER_ID, "rid": float(record_id)}
    )
    page = requests.get(clean.url(f"/reports/{record_id}"), params={"s": forged}, timeout=TIMEOUT_S)
    assert page.status_code == 401


def raw_exchange(port: int, request: bytes, *, wait_s: float = TIMEOUT_S) -> bytes:
    """Send `request` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(request)
        data = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
    return data


def record_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM assessment_records")).scalar_one())


@pytest.mark.parametrize("size", [1_000_000, 5_000_000])
def test_a_body_over_the_cap_is_refused_even_where_the_view_never_reads_it(
    clean: Web, engine: Engine, size: int
) -> None:
    body = b"x" * size
    request = (
        b"POST /api/assessment/createRecord HTTP/1.1\r\nHost: t\r\n"
        + f"Authorization: {user_headers()['Authorization']}\r\n".encode()
        + f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
        + body
        + b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    data = raw_exchange(clean.port, request)
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert b"Connection: close" in data
    assert data.count(b"HTTP/1.1 ") == 1  # closed after the 413, as it said
    assert record_count(engine) == 0


def test_a_chunked_body_over_the_cap_is_refused_where_the_view_never_reads_it(
    clean: Web, engine: Engine
) -> None:
    chunk = b"x" * 8192
    body = b"".join(b"2000\r\n" + chunk + b"\r\n" for _ in range(20)) + b"0\r\n\r\n"
    request = (
        b"POST /api/assessment/createRecord HTTP/1.1\r\nHost: t\r\n"
        + f"Authorization: {user_headers()['Authorization']}\r\n".encode()
        + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + body
    )
    data = raw_exchange(clean.port, request)
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert b"Connection: close" in data
    assert record_count(engine) == 0


def test_a_405_with_an_unread_body_says_close_when_it_closes_and_keeps_alive_when_it_does_not(
    clean: Web,
) -> None:
    for size, closes in ((100_000, True), (10_000, False)):
        request = (
            f"POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n".encode()
            + b"x" * size
            + b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        data = raw_exchange(clean.port, request)
        first = data.split(b"\r\n\r\n", 1)[0]
        answers = data.count(b"HTTP/1.1 ")
        if closes:
            assert first.startswith(b"HTTP/1.1 413"), data[:200]
            assert b"Connection: close" in first
            assert answers == 1
        else:
            assert first.startswith(b"HTTP/1.1 405"), data[:200]
            assert b"Connection: close" not in first
            assert answers == 2  # the next request on the connection is answered
            assert b"HTTP/1.1 200" in data


def test_clients_stalled_midway_through_a_body_hold_no_thread(clean: Web) -> None:
    """More stalled bodies than the web has threads (2 workers x 64): /healthz still answers,
    and each stalled request is answered 408 and closed when its time is up."""
    stalled = []
    try:
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", clean.port), timeout=TIMEOUT_S)
            sock.sendall(
                b"POST /admin/login HTTP/1.1\r\nHost: t\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 5000\r\n\r\n"
                b"token=0123"
            )
            stalled.append(sock)
        time.sleep(1)  # each is past its head, waiting in the middle of its body
        for _ in range(5):
            assert requests.get(clean.url("/healthz"), timeout=TIMEOUT_S).status_code == 200
        data = b""
        stalled[0].settimeout(60)
        while chunk := stalled[0].recv(65536):
            data += chunk
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert b"Connection: close" in data
    finally:
        for sock in stalled:
            sock.close()


# -- long stored strings: no console page overflows -------------------------------------------

LONG = "长" * 20 + "x" * 280  # 300 characters, no space to break at


def plant_long_entries(client: redis.Redis) -> str:
    """A 300-character string in each place a console page shows stored text; the task's id."""
    now = time.time()
    beat = {"kind": "worker", "host": LONG, "pid": 7, "version": LONG, "started_at": now, "last_seen": now}
    client.hset(BEATS_KEY, f"worker:{LONG}:7", json.dumps({**beat, "doing": LONG}))
    dead = {
        "RecordId": 5,
        "RetryCount": 3,
        "EnqueueTime": "2025-01-15T10:30:00",
        "DeadAt": "2025-01-15T10:31:00+00:00",
        "LastError": LONG,
        "Attempts": 4,
    }
    client.lpush(KEYS.report.dead, json.dumps(dead))
    client.lpush(KEYS.report.invalid, LONG.encode())
    job = json.dumps({"RecordId": 7, "RetryCount": 1, "EnqueueTime": "2025-01-15T10:30:00", "Note": LONG})
    client.zadd(KEYS.report.delayed, {f"0000000000000001|{job}": now * 1000 + 60_000})
    task_id = "d" * 32
    client.hset(
        KEYS.task_prefix + task_id,
        mapping={
            "state": "failed",
            "status": 5,
            "matched": 1,
            "maxId": 1,
            "actor": LONG,
            "error": LONG,
            "createdAt": "2025-01-15T10:30:00+00:00",
        },
    )
    return task_id


@pytest.mark.parametrize("width", [390, 1366])
def test_no_console_page_overflows_with_long_stored_strings(
    clean: Web, redis_conn: redis.Redis, browser: Any, width: int
) -> None:
    from tests.support.browser import screenshot

    record_id = submitted_record(clean)
    task_id = plant_long_entries(redis_conn)
    context = browser.new_context(viewport={"width": width, "height": 900}, locale="zh-CN")
    try:
        page = context.new_page()
        page.goto(clean.url("/admin/login"))
        page.get_by_label("您的称呼").fill("长" * 32)
        page.get_by_label("管理员凭证").fill(ADMIN_TOKEN)
        page.get_by_role("button", name="登录").click()
        page.wait_for_url("**/admin/")
        pages = {
            "overview": "/admin/",
            "records": "/admin/records",
            "record": f"/admin/records/{record_id}",
            "delayed": "/admin/delayed",
            "dead": "/admin/dead",
            "invalid": "/admin/invalid",
            "audit": "/admin/audit",
            "drill": "/admin/drill",
            "task": f"/admin/tasks/{task_id}",
        }
        overflowing = {}
        for name, path in pages.items():
            response = page.goto(clean.url(path))
            assert response is not None
            assert response.status == 200, (name, response.status)
            screenshot(page, f"console-long-{name}-{width}")
            widths = page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            if widths[0] > widths[1]:
                overflowing[name] = widths
        assert overflowing == {}
    finally:
        context.close()
