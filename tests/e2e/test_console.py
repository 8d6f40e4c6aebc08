"""The admin console in a real headless Chromium, against the stack started from the Procfile.

An admin signs in, sees a record fail (three retries, the schedule shortened through
REPORT_RETRY_DELAYS_MS) with its reasons on the record's timeline and in the dead letters,
requeues it and watches it complete, regenerates one record and a selection (the outcome
per id), deletes and purges quarantined payloads, reads the audit of all of it, signs out
and is refused. Every page is saved as a
screenshot under build/artifacts/screenshots/console-*.png for a reviewer to look at.
"""

from __future__ import annotations

import pytest
import redis
import requests
from playwright.sync_api import Dialog, Locator, Page, expect
from sqlalchemy import Engine

from observability.throughput import last_hour
from redis_adapters.queues import INVALID_QUEUE_KEY, REPORT_QUEUE_KEY
from redis_adapters.report_queue import RedisReportQueue
from services.domain.status import RecordStatus
from tests.support.browser import screenshot
from tests.support.records import RecordSpec, insert_records
from tests.support.stack import ADMIN_TOKEN, Stack, StackOptions, add_answers, db_status, insert_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Three quick retries instead of 10/30/60 s: the test watches the whole failure in seconds.
SHORT_SCHEDULE = "300,300,300"


@pytest.fixture(scope="module")
def stack_options() -> StackOptions:
    return StackOptions(extra={"REPORT_RETRY_DELAYS_MS": SHORT_SCHEDULE})


def sign_in(page: Page, stack: Stack, *, name: str = "值班管理员") -> None:
    page.goto(f"{stack.base_url}/admin/")
    expect(page).to_have_url(f"{stack.base_url}/admin/login?next=/admin/")
    screenshot(page, "console-login")
    page.get_by_label("您的称呼").fill(name)
    page.get_by_label("管理员凭证").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="登录").click()
    expect(page).to_have_url(f"{stack.base_url}/admin/")
    expect(page.locator("header .who")).to_contain_text(name)


def hour_totals(client: redis.Redis) -> tuple[int, int, int, int]:
    """Processed, failed, retried and dead jobs over the last hour, as the overview sums them."""
    minutes = last_hour(client)
    return (
        sum(m.processed for m in minutes),
        sum(m.failed for m in minutes),
        sum(m.retried for m in minutes),
        sum(m.dead for m in minutes),
    )


def test_an_admin_follows_a_failure_requeues_it_regenerates_and_signs_out(
    stack: Stack, engine: Engine, redis_conn: redis.Redis, page: Page
) -> None:
    # Six submissions that succeed, and one whose answers were lost: every attempt fails,
    # then it is dead-lettered.
    fine = [insert_record(engine, 30) for _ in range(6)]
    failing = insert_record(engine, 31, answers=False)
    RedisReportQueue(redis_conn).enqueue_many([*fine, failing])
    stack.wait_until(
        lambda: db_status(engine, failing) == RecordStatus.FAILED, timeout=30, what="the record to fail"
    )
    assert {db_status(engine, r) for r in fine} == {RecordStatus.COMPLETED}
    # The worker writes its per-minute counts once a second: the overview, rendered once,
    # must not be read before the last attempt's count is in Redis.
    stack.wait_until(
        lambda: hour_totals(redis_conn) == (6, 4, 3, 1), timeout=10, what="the last hour's counts flushed"
    )

    sign_in(page, stack)
    expect(page.locator('[data-figure="dead"]')).to_have_text("1")
    for kind in ("worker", "hotpath", "reconciler"):
        expect(page.locator(f'tr[data-process="{kind}"][data-alive="yes"]').first).to_be_visible()
    expect(page.locator('[data-total="processed"]')).to_have_text("6")
    expect(page.locator('[data-total="failed"]')).to_have_text("4")
    expect(page.locator('[data-total="retried"]')).to_have_text("3")
    expect(page.locator('[data-total="dead"]')).to_have_text("1")
    screenshot(page, "console-overview")

    # The records list, filtered to the failed ones, leads to the record's timeline.
    page.get_by_role("link", name="测评记录").click()
    page.get_by_label("状态").select_option(str(int(RecordStatus.FAILED)))
    page.get_by_role("button", name="筛选").click()
    row = page.locator(f'tr[data-record="{failing}"]')
    expect(row).to_contain_text("生成失败")
    screenshot(page, "console-records-failed")
    row.get_by_role("link", name="详情").click()
    expect(page.locator("h1")).to_contain_text(f"记录 {failing}")
    failures = page.locator('li[data-event="report.generation_failed"]')
    stack.wait_until(lambda: _reload_count(page, failures) == 4, timeout=60, what="four failed attempts")
    expect(failures.first.locator(".reason")).to_contain_text("答案不完整")
    expect(page.locator('li[data-event="report.dead_lettered"]')).to_have_count(1)
    screenshot(page, "console-record-failed")

    # The dead letter, with its error; once the data is repaired, requeued from its row.
    page.get_by_role("link", name="死信队列").click()
    letter = page.locator(f'tr[data-record="{failing}"]')
    expect(letter).to_have_count(1)
    expect(letter.locator("td").nth(2)).to_have_text("4")  # attempts: the first and three retries
    expect(letter.locator(".error-text code")).to_contain_text("答案不完整")
    screenshot(page, "console-dead-letters")
    add_answers(engine, failing)
    letter.get_by_role("button", name="重新入队").click()
    expect(page.locator("h1")).to_have_text("死信重新入队结果")
    expect(page.locator("tr[data-outcome]")).to_have_attribute("data-outcome", "requeued")
    screenshot(page, "console-requeue-outcome")
    stack.wait_until(
        lambda: db_status(engine, failing) == RecordStatus.COMPLETED, timeout=15, what="the requeued report"
    )
    page.goto(f"{stack.base_url}/admin/records/{failing}")
    expect(page.locator("table.dimensions tbody tr")).to_have_count(8)
    screenshot(page, "console-record-completed")
    page.get_by_role("link", name="总览").click()
    expect(page.locator('[data-figure="dead"]')).to_have_text("0")

    # A selection of five: two failed (regenerated), one completed and one pending (2005),
    # one regenerated on its own first with the row's button (so no longer eligible).
    failed_a, failed_b, completed, pending, single = insert_records(
        engine,
        [
            RecordSpec(status=RecordStatus.FAILED, user_id=32),
            RecordSpec(status=RecordStatus.FAILED, user_id=32),
            RecordSpec(status=RecordStatus.COMPLETED, user_id=32, results=True),
            RecordSpec(status=RecordStatus.PENDING, user_id=32),
            RecordSpec(status=RecordStatus.FAILED, user_id=32),
        ],
    )
    page.goto(f"{stack.base_url}/admin/records?user=32")
    page.locator(f'tr[data-record="{single}"]').get_by_role("button", name="重新生成").click()
    expect(page.locator(".flash.ok")).to_contain_text(f"记录 {single} 已重新加入生成队列")
    stack.wait_until(
        lambda: db_status(engine, single) == RecordStatus.COMPLETED,
        timeout=60,
        what="the single regeneration",
    )
    page.reload()
    for record_id in (failed_a, failed_b, completed, pending, single):
        page.get_by_label(f"选择记录 {record_id}").check()
    screenshot(page, "console-records-selected")
    page.get_by_role("button", name="重新生成所选记录").click()
    expect(page.locator("h1")).to_have_text("批量重新生成结果")
    for record_id in (failed_a, failed_b):
        outcome = page.locator(f'tr[data-outcome-id="{record_id}"]')
        expect(outcome).to_have_attribute("data-outcome", "regenerated")
    for record_id in (completed, pending, single):
        outcome = page.locator(f'tr[data-outcome-id="{record_id}"]')
        expect(outcome).to_have_attribute("data-outcome", "skipped")
        expect(outcome).to_contain_text("2005")
    expect(page.locator('[data-count="done"]')).to_have_text("2")
    expect(page.locator('[data-count="skipped"]')).to_have_text("3")
    screenshot(page, "console-batch-outcome")
    stack.wait_until(
        lambda: {db_status(engine, r) for r in (failed_a, failed_b)} == {RecordStatus.COMPLETED},
        timeout=60,
        what="both regenerated reports",
    )

    # Every failed record at once: one task in the worker, its progress on a page of its own
    # that reloads itself until the task is done.
    failed_all = insert_records(engine, [RecordSpec(status=RecordStatus.FAILED, user_id=33)] * 3)
    page.get_by_role("link", name="测评记录").click()
    asked: list[str] = []  # a bulk action asks first, as the other bulk actions do

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.get_by_role("button", name="重新生成全部失败记录").click()
    expect(page.locator("h1")).to_have_text("按条件重新生成")
    assert len(asked) == 1
    assert "生成失败" in asked[0]
    expect(page.locator("[data-state]")).to_have_attribute("data-state", "done", timeout=15_000)
    expect(page.locator('[data-count="matched"]')).to_have_text("3")
    expect(page.locator('[data-count="regenerated"]')).to_have_text("3")
    screenshot(page, "console-task")
    stack.wait_until(
        lambda: {db_status(engine, r) for r in failed_all} == {RecordStatus.COMPLETED},
        timeout=60,
        what="the task's regenerated reports",
    )

    # Payloads the worker could not read are quarantined: shown verbatim, deleted, purged.
    garbage = [b'{"RecordId":"x"}', b"not json \xff", b"[1,2,3]"]
    redis_conn.lpush(REPORT_QUEUE_KEY, *garbage)
    stack.wait_until(lambda: redis_conn.llen(INVALID_QUEUE_KEY) == 3, timeout=60, what="3 quarantined")
    page.get_by_role("link", name="无效消息").click()
    expect(page.locator("tr[data-invalid] pre")).to_have_count(3)
    expect(page.locator("tr[data-invalid] pre").filter(has_text='{"RecordId":"x"}')).to_have_count(1)
    expect(page.locator("tr[data-invalid] pre").filter(has_text="not json \\xff")).to_have_count(1)
    screenshot(page, "console-invalid")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-invalid]").filter(has_text="[1,2,3]").get_by_role("button", name="删除").click()
    expect(page.locator("tr[data-outcome]")).to_have_attribute("data-outcome", "deleted")
    assert redis_conn.llen(INVALID_QUEUE_KEY) == 2
    page.get_by_role("link", name="返回").click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="全部清空").click()
    expect(page.locator(".flash.ok")).to_contain_text("共删除 2 条")
    assert redis_conn.llen(INVALID_QUEUE_KEY) == 0

    # Every action is in the audit, under this admin's name, filterable.
    page.get_by_role("link", name="操作审计").click()
    actions = page.locator("table.audit tbody tr[data-action]")
    newest_first = [
        "purge_invalid",
        "delete_invalid",
        "regenerate_matching",
        "batch_regenerate",
        "regenerate",
        "requeue",
        "signin",  # the sign-in is in the audit too
    ]
    expect(actions).to_have_count(len(newest_first))
    for i, action in enumerate(newest_first):
        expect(actions.nth(i)).to_have_attribute("data-action", action)
    expect(actions.first).to_contain_text("管理后台 · 值班管理员")  # console:值班管理员, in words
    screenshot(page, "console-audit")
    page.locator('select[name="action"]').select_option("requeue")
    page.get_by_role("button", name="筛选").click()
    expect(actions).to_have_count(1)
    expect(actions.first).to_contain_text("重新入队 1 项，跳过 0 项")

    # Signed out, the console is closed: pages send to the sign-in, forms are refused.
    page.get_by_role("button", name="退出登录").click()
    expect(page).to_have_url(f"{stack.base_url}/admin/login")
    expect(page.locator(".flash")).to_contain_text("已退出登录")
    page.goto(f"{stack.base_url}/admin/dead")
    expect(page).to_have_url(f"{stack.base_url}/admin/login?next=/admin/dead")
    screenshot(page, "console-signed-out")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    forged = requests.post(
        f"{stack.base_url}/admin/dead/requeue",
        data={"all": "1"},
        cookies=cookies,
        timeout=30,
        allow_redirects=False,
    )
    assert forged.status_code == 401


def _reload_count(page: Page, locator: Locator) -> int:
    """Reload (events reach the log within about a second) and count."""
    page.reload()
    return locator.count()
