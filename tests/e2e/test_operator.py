"""An operator's day on the stack `make run` starts (the Procfile's processes under supervisord),
in a real headless Chromium, from a shell, and with supervisorctl.

- Every console page fits a phone (390 px) and a desktop (1366 px): no horizontal overflow,
  the navigation and the sign-out within the screen; each page saved as a screenshot
  (build/artifacts/screenshots/operator-<page>-<width>.png, copied to docs/console/).
- The delayed-retries table shows the retries the broker really writes, made by real
  failing attempts (the fault drill): the record, its attempts, the due time, the last
  error; "retry now" runs the next attempt at once and "delete" ends the job (status 5).
- With the worker stopped (`make stop PROCESS=worker`, as the README and docs/operations.md say), every page
  raises the alarm (no worker; then the oldest job waiting too long), the worker shows as
  stopped, not lost, and `/healthz/workers` does not count it gone; the command the alarm
  prints, run as printed in a fresh shell in the checkout, starts it again and the alarm goes.
- Every console action answers with a redirect: reloading the page it leads to sends
  nothing again (one audit entry per action).
- A record's page says its fault drill and its next retry; the charts show the last hour
  and days at phone width; an unknown address keeps the navigation; invalid payloads say
  why they cannot be read.
- The CLI, run from a shell that has only the banner's export line, talks to this stack,
  while another Redis (a decoy, where a fallback to the default server would go) holds
  other queues; without a stack it refuses instead of guessing.
- An expired report link is a page that says what to do.

The retry schedule is long (10 minutes) so a retry waits until the test acts on it; the
tests advance it with "retry now", as an operator would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import requests
from itsdangerous import TimestampSigner
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import Engine

from redis_adapters.queue_figures import queue_figures
from redis_adapters.queues import INVALID_QUEUE_KEY, REPORT_QUEUE_KEY
from scripts import servers
from services.domain.status import RecordStatus
from tests.support.browser import ARTIFACTS_DIR, ROOT, screenshot
from tests.support.stack import ADMIN_TOKEN, Stack, StackOptions, db_status
from tests.support.urls import CLOSED_DATABASE_URL
from web.report_page import LINK_MAX_AGE_S

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Ten minutes per retry: a retry waits for the test (which advances it with "retry now").
LONG_SCHEDULE = "600000,600000,600000"
#: The alarm on a queue's oldest job, short for the test (the default is two minutes).
ALARM_AFTER_S = 3
PHONE, DESKTOP = 390, 1366
#: Where the screenshots of every page at both widths are kept for readers of docs/operations.md.
DOCS = ROOT / "docs" / "console"
USER_PATH = "/api/assessment"
ADMIN_PATH = "/api/admin"


@pytest.fixture(scope="module")
def stack_options() -> StackOptions:
    return StackOptions(
        extra={"REPORT_RETRY_DELAYS_MS": LONG_SCHEDULE, "ALARM_OLDEST_JOB_S": str(ALARM_AFTER_S)}
    )


# -- the product's own paths ---------------------------------------------------------------------


def start(stack: Stack, user_id: int) -> int:
    """Create and start a record over HTTP, as the mini-program does; its id."""
    token = stack.user(user_id)
    record_id = int(stack.ok("POST", f"{USER_PATH}/createRecord", token)["id"])
    stack.ok("POST", f"{USER_PATH}/startAssessment", token, {"recordId": record_id})
    return record_id


def answer(stack: Stack, user_id: int, record_id: int) -> None:
    """Answer every question and submit, as the mini-program does."""
    token = stack.user(user_id)
    questions = stack.ok("GET", f"{USER_PATH}/questions", token)
    answers = [{"questionId": q["id"], "value": 3 + q["id"] % 3} for q in questions]
    stack.ok("POST", f"{USER_PATH}/submitAnswers", token, {"recordId": record_id, "answers": answers})


def submit(stack: Stack, user_id: int, *, drilled: bool = False) -> int:
    """A record submitted over HTTP; with `drilled`, put in the fault drill before its submission,
    so that every attempt to generate its report fails."""
    record_id = start(stack, user_id)
    if drilled:
        admin(stack, "POST", "/drill/start", {"ids": [record_id], "minutes": 60})
    answer(stack, user_id, record_id)
    return record_id


def admin(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    return stack.ok(method, f"{ADMIN_PATH}{path}", ADMIN_TOKEN, body)


def delayed_of(stack: Stack, record_id: int) -> dict[str, Any] | None:
    items = admin(stack, "GET", "/queue/delayed?limit=200")["items"]
    return next((i for i in items if i["recordId"] == record_id), None)


def wait_delayed(stack: Stack, record_id: int, attempts: int) -> dict[str, Any]:
    """The record's delayed retry once it has made `attempts` failed attempts."""
    found: list[dict[str, Any]] = []

    def check() -> bool:
        item = delayed_of(stack, record_id)
        found[:] = [item] if item and item["attempts"] == attempts else []
        return bool(found)

    stack.wait_until(check, timeout=30, what=f"record {record_id}'s retry after {attempts} attempt(s)")
    return found[0]


def dead_letter(stack: Stack, engine: Engine, user_id: int) -> int:
    """A record whose four real attempts fail (the drill), advanced with "retry now": dead-lettered."""
    record_id = submit(stack, user_id, drilled=True)
    for attempts in (1, 2, 3):
        retry = wait_delayed(stack, record_id, attempts)
        admin(stack, "POST", "/queue/delayed/retryNow", {"ids": [retry["messageId"]]})
    stack.wait_until(
        lambda: db_status(engine, record_id) == RecordStatus.FAILED, timeout=30, what="the dead letter"
    )
    return record_id


# -- the browser ----------------------------------------------------------------------------------


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": PHONE, "height": 844}, locale="zh-CN")
    yield context.new_page()
    context.close()


@pytest.fixture
def desktop(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": DESKTOP, "height": 900}, locale="zh-CN")
    yield context.new_page()
    context.close()


def sign_in(page: Page, stack: Stack, name: str = "值班员") -> None:
    page.goto(f"{stack.base_url}/admin/login")
    page.get_by_label("您的称呼").fill(name)
    page.get_by_label("管理员凭证").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="登录").click()
    expect(page).to_have_url(f"{stack.base_url}/admin/")


def assert_fits(page: Page, width: int, what: str) -> None:
    """No horizontal overflow; on a console page, every navigation link and the sign-out
    button inside the screen, each on one line (not a character per line)."""
    scroll, client = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client == width, f"{what} at {width} px: {scroll} px wide"
    targets = [*page.locator("header.top nav a").all(), *page.locator("header.top .who button").all()]
    for button in page.locator("main button:visible, main a.button:visible").all():
        box = button.bounding_box()
        assert box is not None
        assert box["height"] < 40, f"{what}: the button {button.inner_text()!r} wraps ({box['height']} px)"
    for target in targets:
        box = target.bounding_box()
        assert box is not None, f"{what}: {target.inner_text()} not shown"
        assert box["x"] >= 0, f"{what}: {target.inner_text()} off-screen"
        assert box["x"] + box["width"] <= width, f"{what}: {target.inner_text()} off-screen"
        assert box["height"] < 40, f"{what}: {target.inner_text()} wraps ({box['height']} px)"


def shoot(page: Page, name: str, width: int) -> None:
    assert_fits(page, width, name)
    path = screenshot(page, f"operator-{name}-{width}")
    if os.environ.get("MI_DOCS_SCREENSHOTS") == "1":  # refresh docs/operations.md's pictures
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / f"{name}-{width}.png")


def assert_charts_show_their_end(page: Page, width: int) -> None:
    """Both charts within the screen, their bars too, the most recent ones on the right."""
    plots = page.locator("svg.chart-plot").all()
    assert len(plots) == 2
    for plot in plots:
        box = plot.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= width
        bars = [b for b in (r.bounding_box() for r in plot.locator("rect").all()) if b is not None]
        assert bars, "the module's reports drew no bar"
        assert all(b["x"] >= box["x"] and b["x"] + b["width"] <= box["x"] + box["width"] + 1 for b in bars)
        assert max(b["x"] for b in bars) > box["x"] + box["width"] / 2  # the recent ones, in view


def what_it_says(page: Page, name: str, width: int, stack: Stack, waiting: int) -> None:
    """What a page must say besides fitting the screen."""
    if name == "overview":
        assert_charts_show_their_end(page, width)
    if name == "unknown-page":  # a page of the console, not the API's error
        expect(page.locator("h1")).to_contain_text("404")
        expect(page.locator("main")).to_contain_text("页面不存在")
        expect(page.locator("header.top nav a")).to_have_count(7)
        expect(page.get_by_role("button", name="退出登录")).to_be_visible()
    if name == "record-retrying":  # its drill and its next retry, with their times
        expect(page.locator(f'[data-drill="{waiting}"]')).to_contain_text("故障演练中")
        retry = page.locator("[data-next-retry]")
        expect(retry).to_contain_text("下一次尝试在")
        expect(retry).to_contain_text(shown_time(delayed_of(stack, waiting)))
    if name == "invalid":
        reasons = sorted(r.inner_text() for r in page.locator("[data-reason]").all())
        assert reasons == ["不是合法的 JSON", "缺少字段 RetryCount、EnqueueTime"], reasons
        # When the worker quarantined each, as the broker recorded it, in the admin's time zone.
        times = [t.inner_text() for t in page.locator("[data-quarantined-at]").all()]
        assert times == [shown_time({"dueAt": i["quarantinedAt"]}) for i in invalid_of(stack)], times
    if name.startswith("record-"):  # the timeline in words: no key, no Python value
        timeline = page.locator("ol.timeline")
        text = timeline.inner_text() if timeline.count() else ""
        for raw in ("statusSet", "deadLetter", "attempt", "True", "False", "None", "b'"):
            assert raw not in text, (name, raw)


def invalid_of(stack: Stack) -> list[dict[str, Any]]:
    """The quarantined payloads as the admin API lists them, newest first."""
    items: list[dict[str, Any]] = admin(stack, "GET", "/queue/invalid")["items"]
    return items


def shown_time(delayed: dict[str, Any] | None) -> str:
    """A delayed retry's due time as the console shows it (Asia/Shanghai, to the second)."""
    assert delayed is not None
    due = datetime.fromisoformat(delayed["dueAt"]).astimezone(ZoneInfo("Asia/Shanghai"))
    return f"{due:%Y-%m-%d %H:%M:%S}"


def reload_until(page: Page, check: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout} s"
        time.sleep(0.3)
        page.reload()


# -- every page, at both widths -------------------------------------------------------------------


def expired_link(stack: Stack, record_id: int, user_id: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """The record's report link as handed out a week and a minute ago (the product's signing,
    its clock set back)."""
    signed_at = int(time.time()) - LINK_MAX_AGE_S - 60
    with monkeypatch.context() as m:
        m.setattr(TimestampSigner, "get_timestamp", lambda self: signed_at)
        from web.report_page import sign_report_link

        signed = sign_report_link(stack.settings.secret_key, user_id, record_id)
    return f"{stack.base_url}/reports/{record_id}?s={signed}"


def test_every_console_page_fits_a_phone_and_a_desktop(
    stack: Stack,
    engine: Engine,
    redis_conn: redis.Redis,
    phone: Page,
    desktop: Page,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reports that complete, a dead letter, a retry waiting, quarantined payloads, a task.
    completed = [submit(stack, 2001) for _ in range(3)]
    stack.wait_until(
        lambda: {db_status(engine, r) for r in completed} == {RecordStatus.COMPLETED},
        timeout=30,
        what="three reports",
    )
    failing = dead_letter(stack, engine, 2003)
    waiting = submit(stack, 2004, drilled=True)
    wait_delayed(stack, waiting, 1)
    # A record whose retry an operator deleted (status 5), then regenerated by a task once the
    # drill is over.
    given_up = submit(stack, 2005, drilled=True)
    retry = wait_delayed(stack, given_up, 1)
    admin(stack, "POST", "/queue/delayed/delete", {"ids": [retry["messageId"]]})
    admin(stack, "POST", "/drill/stop", {"ids": [given_up]})
    status, started = stack.call(
        "POST",
        f"{ADMIN_PATH}/assessmentRecord/regenerateMatching",
        ADMIN_TOKEN,
        {"status": 5, "userId": 2005},
    )
    assert (status, started["data"]["matched"]) == (202, 1), started
    task_id = started["data"]["taskId"]
    stack.wait_until(
        lambda: db_status(engine, given_up) == RecordStatus.COMPLETED, timeout=30, what="the task's report"
    )
    long_payload = '{"RecordId": "not a number", "Padding": "' + "x" * 3600 + '"}'
    redis_conn.lpush(REPORT_QUEUE_KEY, b"not json \xff", long_payload.encode())
    stack.wait_until(lambda: redis_conn.llen(INVALID_QUEUE_KEY) == 2, timeout=30, what="2 quarantined")
    # The failed attempts' events (with their reasons) reach the database within a second or so.
    stack.wait_until(
        lambda: (delayed_of(stack, waiting) or {}).get("lastError") is not None,
        timeout=30,
        what="the retry's last error",
    )

    pages = {
        "overview": "/admin/",
        "records": "/admin/records",
        "record-failed": f"/admin/records/{failing}",
        "record-completed": f"/admin/records/{completed[0]}",
        "delayed": "/admin/delayed",
        "dead": "/admin/dead",
        "invalid": "/admin/invalid",
        "audit": "/admin/audit",
        "drill": "/admin/drill",
        "task": f"/admin/tasks/{task_id}",
        "not-found": "/admin/records/999999",
        "record-retrying": f"/admin/records/{waiting}",
        "unknown-page": "/admin/no-such-page",
    }
    for page, width in ((phone, PHONE), (desktop, DESKTOP)):
        page.goto(f"{stack.base_url}/admin/")
        shoot(page, "login", width)
        sign_in(page, stack)
        for name, path in pages.items():
            page.goto(f"{stack.base_url}{path}")
            expect(page.locator("#alarms")).to_have_count(0)  # a healthy stack raises no alarm
            shoot(page, name, width)
            what_it_says(page, name, width, stack, waiting)
        # An action's outcome page: the selection's outcome per id.
        page.goto(f"{stack.base_url}/admin/records?user=2001")
        page.get_by_label(f"选择记录 {completed[1]}").check()
        page.get_by_role("button", name="重新生成所选记录").click()
        expect(page.locator("h1")).to_have_text("批量重新生成结果")
        shoot(page, "outcome", width)
        # What a reader of a link sees: the report, and the page of an expired link.
        report_url = stack.ok("GET", f"{USER_PATH}/report?recordId={completed[2]}", stack.user(2001))[
            "pageUrl"
        ]
        page.goto(f"{stack.base_url}{report_url}")
        expect(page.locator("h1")).to_have_text("多元智能测评报告")
        shoot(page, "report", width)
        if width == DESKTOP:  # the A4 print, for a reviewer to look at
            page.pdf(path=str(ARTIFACTS_DIR / "operator-report-a4.pdf"), format="A4", print_background=True)
        response = page.goto(expired_link(stack, completed[2], 2001, monkeypatch))
        assert response is not None
        assert response.status == 401
        assert response.headers["content-type"].startswith("text/html")
        expect(page.locator(".message")).to_contain_text("报告链接无效或已过期")
        shoot(page, "report-link-expired", width)
        page.goto(f"{stack.base_url}/")
        expect(page.get_by_role("link", name=re.compile("管理后台"))).to_be_visible()
        shoot(page, "home", width)

    # What the pages showed is what the product holds.
    figures = queue_figures(redis_conn)
    assert (figures.dead, figures.invalid, figures.delayed) == (1, 2, 1)
    assert db_status(engine, failing) == RecordStatus.FAILED
    assert (
        requests.get(f"{stack.base_url}/favicon.ico", timeout=10)
        .headers["content-type"]
        .startswith("image/svg+xml")
    )


# -- the delayed table, from real retries -------------------------------------------------------------


def test_the_delayed_table_shows_real_retries_and_retries_now_and_deletes(
    stack: Stack, engine: Engine, desktop: Page
) -> None:
    page = desktop
    sign_in(page, stack, name="重试值班")
    record_id = start(stack, 2101)
    # The fault drill, from its page, then the submission: its attempt fails for real.
    page.goto(f"{stack.base_url}/admin/drill")
    page.get_by_label("记录ID").fill(str(record_id))
    page.get_by_role("button", name="开始演练").click()
    expect(page.locator(f'tr[data-drilled="{record_id}"]')).to_have_count(1)
    answer(stack, 2101, record_id)
    first = wait_delayed(stack, record_id, 1)

    page.goto(f"{stack.base_url}/admin/delayed")
    row = page.locator(f'tr[data-record="{record_id}"]')
    expect(row).to_have_count(1)
    expect(row.get_by_role("link", name=str(record_id))).to_be_visible()
    expect(row.locator("[data-attempts]")).to_have_text("1")
    expect(row).to_have_attribute("data-delayed", first["messageId"])
    reload_until(page, lambda: "故障演练" in row.inner_text(), "the attempt's error")

    row.get_by_role("button", name="立即重试").click()
    expect(page.locator("h1")).to_have_text("立即重试结果")
    expect(page.locator("tr[data-outcome]")).to_have_attribute("data-outcome", "retried")
    second = wait_delayed(stack, record_id, 2)  # the next attempt ran at once, and failed again
    assert second["messageId"] != first["messageId"]
    page.goto(f"{stack.base_url}/admin/delayed")
    expect(row.locator("[data-attempts]")).to_have_text("2")

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="删除").click()
    expect(page.locator("h1")).to_have_text("删除重试结果")
    expect(page.locator("tr[data-outcome]")).to_have_attribute("data-outcome", "deleted")
    assert delayed_of(stack, record_id) is None
    assert db_status(engine, record_id) == RecordStatus.FAILED
    page.goto(f"{stack.base_url}/admin/audit?actor=console:重试值班")
    actions = [a.get_attribute("data-action") for a in page.locator("tr[data-action]").all()]
    assert actions == ["delete_delayed", "retry_now", "drill_start", "signin"]  # the sign-in first


# -- the alarm ----------------------------------------------------------------------------------------


def in_the_checkout(stack: Stack, command: str) -> subprocess.CompletedProcess[str]:
    """`command` as typed in a fresh shell in the checkout: nothing exported, no virtualenv
    activated. The test's stack keeps its state in a folder of its own, which MI_STATE_DIR
    names (a `make run` of the checkout uses .state/ and needs none); VENV names the suite's
    virtualenv, which is the checkout's .venv but under `make test-latest`."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(ROOT),
            "MI_STATE_DIR": str(stack.current.state),
            "VENV": sys.prefix,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_alarm_rises_when_the_worker_is_stopped_and_its_advice_starts_it_again(
    stack: Stack, engine: Engine, phone: Page
) -> None:
    page = phone
    sign_in(page, stack, name="告警值班")
    expect(page.locator("#alarms")).to_have_count(0)
    stopped = in_the_checkout(stack, "make stop PROCESS=worker")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "worker stopped" in stopped.stdout
    started = None
    try:
        page.goto(f"{stack.base_url}/admin/records")  # every page carries the banner
        alarm = page.locator('[data-alarm="no_worker"]')
        expect(alarm).to_be_visible()
        status = in_the_checkout(stack, "make status")
        assert re.search(r"^  worker +STOPPED", status.stdout, re.M), status.stdout + status.stderr
        page.goto(f"{stack.base_url}/admin/")
        workers = page.locator('tr[data-process="worker"]')
        assert workers.count() >= 1
        assert {w.get_attribute("data-state") for w in workers.all()} <= {"stopped"}  # not lost
        health = requests.get(f"{stack.base_url}/healthz/workers", timeout=10)
        assert health.status_code == 503
        assert health.json()["data"]["worker"]["alive"] == 0
        assert health.json()["data"]["worker"]["gone"] == 0
        # A submission waits: past the threshold the banner says so too.
        record_id = submit(stack, 2201)
        reload_until(page, lambda: page.locator('[data-alarm="queue_wait"]').count() == 1, "the wait alarm")
        assert_fits(page, PHONE, "the alarm")
        shoot(page, "overview-alarm", PHONE)
        # The alarm's advice, run as it is printed.
        printed = re.search(r"make start PROCESS=\w+", page.locator('[data-alarm="no_worker"]').inner_text())
        assert printed, page.locator('[data-alarm="no_worker"]').inner_text()
        assert printed.group(0) == "make start PROCESS=worker"
        started = in_the_checkout(stack, printed.group(0))
        assert started.returncode == 0, started.stdout + started.stderr
        assert "worker started" in started.stdout
    finally:
        if started is None or started.returncode != 0:
            stack.current.supervisor().startProcess("stack:worker", True)
    reload_until(page, lambda: page.locator("#alarms").count() == 0, "the alarm gone", timeout=60)
    stack.wait_until(
        lambda: db_status(engine, record_id) == RecordStatus.COMPLETED, timeout=30, what="report"
    )


# -- the CLI from another shell -------------------------------------------------------------------------

#: Runs `flask` with the default servers moved to the decoys: where a fallback would go.
WITH_DEFAULTS = """
import sys
import config.settings as config
config.DEFAULT_REDIS_URL = sys.argv.pop(1)
config.DEFAULT_DATABASE_URL = sys.argv.pop(1)
from flask.cli import main
sys.argv[0] = "flask"
main()
"""


def export_line(stack: Stack) -> str:
    lines = [
        line.strip() for line in stack.current.output().splitlines() if line.strip().startswith("export ")
    ]
    assert len(lines) == 1, stack.current.output()[-3000:]
    return lines[0]


def banner_redis_cli(stack: Stack) -> str:
    """The banner's redis-cli command line (without its comment)."""
    line = next(
        line for line in stack.current.output().splitlines() if "redis-cli " in line and " -n " in line
    )
    return line.split("   (", 1)[0].strip()


def shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`bash -c script` with nothing in its environment but a bare PATH and HOME, as a new terminal."""
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_in_another_shell_talks_to_this_stack_never_to_another_redis(
    stack: Stack, redis_conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    assert "CRIT" not in stack.current.output()  # supervisord's socket has its password
    # The stack is the module's: earlier tests may have quarantined payloads already, so wait
    # for this one's own (a figure read before the worker moved it would be one short).
    invalid_before = redis_conn.llen(INVALID_QUEUE_KEY)
    redis_conn.lpush(REPORT_QUEUE_KEY, b"garbage for the CLI")
    stack.wait_until(
        lambda: redis_conn.llen(INVALID_QUEUE_KEY) >= invalid_before + 1, timeout=30, what="quarantined"
    )
    ours = queue_figures(redis_conn)
    wrapper = tmp_path / "flask_with_defaults.py"
    wrapper.write_text(WITH_DEFAULTS)
    with servers.temporary_directory("mi-decoy-redis-") as folder:
        decoy = servers.RedisServer(folder / "redis")
        decoy.start()
        try:
            other = redis.Redis(port=decoy.port)
            other.lpush(INVALID_QUEUE_KEY, *[f"someone else's {i}" for i in range(7)])
            other.lpush(REPORT_QUEUE_KEY, *[f"their job {i}" for i in range(5)])
            # `python` as the export line's PATH finds it (the venv's).
            cli = f"python {wrapper} {decoy.url} {CLOSED_DATABASE_URL} --app web"
            bare = cli.replace("python", sys.executable, 1)  # no export line: the venv's python named

            stats = shell(f"{export_line(stack)}; {cli} queue stats", tmp_path)
            assert stats.returncode == 0, stats.stderr
            report = next(line.split() for line in stats.stdout.splitlines() if line.startswith("report"))
            assert report == [
                "report",
                str(ours.queued),
                str(ours.delayed),
                "0",
                str(ours.dead),
                str(ours.invalid),
            ]
            assert redis_url.rsplit("@", 1)[-1] in stats.stderr  # it says which Redis: the stack's
            assert str(decoy.port) not in stats.stderr + stats.stdout

            purged = shell(f"{export_line(stack)}; {cli} queue purge-invalid --yes", tmp_path)
            assert purged.returncode == 0, purged.stderr
            assert f"{ours.invalid} invalid payload(s) purged" in purged.stdout
            assert redis_conn.llen(INVALID_QUEUE_KEY) == 0
            assert other.llen(INVALID_QUEUE_KEY) == 7  # the other Redis untouched
            assert other.llen(REPORT_QUEUE_KEY) == 5

            # ISO 8601 with or without seconds and offset, as docs/operations.md writes them.
            for since in ("2025-01-15T08:00", "2025-01-15 08:00:30", "2025-01-15T08:00+08:00", "2025-01-15"):
                audit = shell(
                    f"{export_line(stack)}; {cli} audit --since '{since}' --action purge_invalid", tmp_path
                )
                assert audit.returncode == 0, audit.stderr
                assert "1 of 1 audit entries" in audit.stdout

            # The redis-cli line of the banner works from that shell (where redis-cli is installed).
            if shutil.which("redis-cli"):
                length = shell(
                    f"{export_line(stack)}; {banner_redis_cli(stack)} LLEN {REPORT_QUEUE_KEY}", tmp_path
                )
                assert length.stdout.strip() == str(redis_conn.llen(REPORT_QUEUE_KEY)), length.stderr

            # Given the stack's folder, without the export line: the same stack.
            by_folder = shell(f"{bare} queue stats --stack {stack.current.state}", tmp_path)
            assert by_folder.returncode == 0, by_folder.stderr
            assert f"--stack {stack.current.state}" in by_folder.stderr

            # Nothing at all: it refuses, rather than show the other Redis's queues.
            if not (ROOT / ".state" / "stack.json").exists():  # a `make run` of this checkout would be found
                alone = shell(f"{bare} queue stats", tmp_path)
                assert alone.returncode != 0
                assert "no stack found" in alone.stderr
                assert "7" not in alone.stdout
        finally:
            decoy.stop()


# -- every action answers with a redirect ---------------------------------------------------------


def audited(stack: Stack, actor: str, action: str) -> int:
    """How many audit entries of `action` by `actor` the product holds."""
    page = admin(stack, "GET", f"/audit?actor={actor}&action={action}&limit=10")
    return int(page["total"])


def test_every_console_action_redirects_and_a_reload_repeats_nothing(
    stack: Stack, engine: Engine, redis_conn: redis.Redis, desktop: Page
) -> None:
    """POST, redirect, GET: after each action the page is a GET; reloading it sends nothing
    again (one audit entry per action, each checked after its reload)."""
    page = desktop
    name = "重载值班"
    actor = f"console:{name}"
    requeued, deleted = dead_letter(stack, engine, 2301), dead_letter(stack, engine, 2302)
    retried, given_up = submit(stack, 2303, drilled=True), submit(stack, 2304, drilled=True)
    to_retry, to_delete = wait_delayed(stack, retried, 1), wait_delayed(stack, given_up, 1)
    invalid_before = redis_conn.llen(INVALID_QUEUE_KEY)
    redis_conn.lpush(REPORT_QUEUE_KEY, b"reload me 1", b"reload me 2")
    stack.wait_until(
        lambda: redis_conn.llen(INVALID_QUEUE_KEY) == invalid_before + 2, timeout=30, what="2 quarantined"
    )
    drilled = start(stack, 2305)
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, stack, name=name)

    def then_reload(action: str, posted_to: str) -> None:
        """The action ran once; the browser is on a GET page; a reload changes nothing."""
        stack.wait_until(lambda: audited(stack, actor, action) == 1, timeout=30, what=f"{action} audited")
        assert not page.url.endswith(posted_to), page.url
        response = page.reload()
        assert response is not None
        assert response.request.method == "GET"
        assert response.status in (200, 404), response.status
        time.sleep(0.5)
        assert audited(stack, actor, action) == 1, f"{action}: the reload ran it again"

    # Dead letters: requeue one, delete another (each letter's own button).
    page.goto(f"{stack.base_url}/admin/dead")
    page.locator(f'tr[data-record="{requeued}"]').get_by_role("button", name="重新入队").click()
    expect(page.locator("h1")).to_have_text("死信重新入队结果")
    then_reload("requeue", "/admin/dead/requeue")
    page.goto(f"{stack.base_url}/admin/dead")
    page.locator(f'tr[data-record="{deleted}"]').get_by_role("button", name="删除").click()
    expect(page.locator("h1")).to_have_text("删除死信结果")
    then_reload("delete_dead", "/admin/dead/delete")

    # Delayed retries: retry one now, delete another.
    page.goto(f"{stack.base_url}/admin/delayed")
    page.locator(f'tr[data-delayed="{to_retry["messageId"]}"]').get_by_role("button", name="立即重试").click()
    expect(page.locator("h1")).to_have_text("立即重试结果")
    then_reload("retry_now", "/admin/delayed/retry")
    page.goto(f"{stack.base_url}/admin/delayed")
    page.locator(f'tr[data-delayed="{to_delete["messageId"]}"]').get_by_role("button", name="删除").click()
    expect(page.locator("h1")).to_have_text("删除重试结果")
    then_reload("delete_delayed", "/admin/delayed/delete")

    # Invalid payloads: delete one, then purge.
    page.goto(f"{stack.base_url}/admin/invalid")
    page.locator("tr[data-invalid]").first.get_by_role("button", name="删除").click()
    expect(page.locator("h1")).to_have_text("删除无效消息结果")
    then_reload("delete_invalid", "/admin/invalid/delete")
    page.goto(f"{stack.base_url}/admin/invalid")
    page.get_by_role("button", name="全部清空").click()
    expect(page.locator(".flash.ok")).to_contain_text("已清空无效消息队列")
    then_reload("purge_invalid", "/admin/invalid/purge")

    # The fault drill: start, stop.
    page.goto(f"{stack.base_url}/admin/drill")
    page.get_by_label("记录ID").fill(str(drilled))
    page.get_by_role("button", name="开始演练").click()
    expect(page.locator(f'tr[data-drilled="{drilled}"]')).to_have_count(1)
    then_reload("drill_start", "/admin/drill/start")
    page.locator(f'tr[data-drilled="{drilled}"]').get_by_role("button", name="结束演练").click()
    expect(page.locator(f'tr[data-drilled="{drilled}"]')).to_have_count(0)
    then_reload("drill_stop", "/admin/drill/stop")

    # Records: one from its page, a selection, every failed one (a task).
    page.goto(f"{stack.base_url}/admin/records/{given_up}")
    page.get_by_role("button", name="重新生成报告").click()
    expect(page.locator(".flash.ok")).to_contain_text("已重新加入生成队列")
    then_reload("regenerate", f"/admin/records/{given_up}/regenerate")
    page.goto(f"{stack.base_url}/admin/records?user=2304")
    page.get_by_label(f"选择记录 {given_up}").check()
    page.get_by_role("button", name="重新生成所选记录").click()
    expect(page.locator("h1")).to_have_text("批量重新生成结果")
    then_reload("batch_regenerate", "/admin/records/regenerate")
    page.goto(f"{stack.base_url}/admin/records")
    page.get_by_role("button", name="重新生成全部失败记录").click()
    expect(page.locator("h1")).to_have_text("按条件重新生成")
    then_reload("regenerate_matching", "/admin/records/regenerate-failed")
