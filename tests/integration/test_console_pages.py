"""The admin console's pages on the real PostgreSQL and Redis (Flask's test client, no browser):
days typed in the admin's time zone, bad filters named, the overview's look inside the
queue, a record's detail, the sign-in limit, and an audited action."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import redis
from flask import Flask
from flask.testing import FlaskClient
from listbroker import RedisListBroker
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from observability.liveness import BEAT_TIMEOUT_S, STOPPED, ProcessIdentity, write_beat
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_figures import oldest_age_s
from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.queues import REPORT_ACTOR_NAME, REPORT_QUEUE_KEY, REPORT_QUEUE_NAME
from redis_adapters.report_codec import ReportCodec
from redis_adapters.report_message import ReportQueueMessage
from services.domain.questionnaire import load_questionnaire
from services.domain.status import RecordStatus
from services.persistence.uow import UnitOfWork
from services.usecases.audit import list_audit
from services.usecases.record_detail import admin_record_detail
from tests.support.console import CSRF, csrf_token, sign_in
from tests.support.records import RecordSpec
from tests.support.redis_keys import bytes_list, clean_redis
from tests.support.web_app import ADMIN_TOKEN, Records
from web import create_app
from web.console.display import local_time
from web.console.limits import FREE_ATTEMPTS


def set_created_at(engine: Engine, record_id: int, when: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE assessment_records SET created_at = :t WHERE id = :id"), {"t": when, "id": record_id}
        )


def listed_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-record="(\d+)">', html)]


def test_record_days_are_the_admins_days(client: FlaskClient, records: Records, engine: Engine) -> None:
    late, next_day = records.insert(
        RecordSpec(status=RecordStatus.PENDING), RecordSpec(status=RecordStatus.PENDING)
    )
    # 23:30 and 00:30 in Shanghai: two days there, one day in UTC.
    set_created_at(engine, late, datetime(2026, 12, 1, 15, 30, tzinfo=UTC))
    set_created_at(engine, next_day, datetime(2026, 12, 1, 16, 30, tzinfo=UTC))
    assert sign_in(client) == 302

    def listed(query: str) -> list[int]:
        return listed_ids(client.get(f"/admin/records?{query}").get_data(as_text=True))

    assert listed("from=2026-12-02&to=2026-12-02") == [next_day]
    assert listed("from=2026-12-01&to=2026-12-01") == [late]
    assert listed("from=2026-12-01") == [next_day, late]
    assert listed("to=2026-11-30") == []
    page = client.get("/admin/records?from=2026-12-02&to=2026-12-02").get_data(as_text=True)
    assert "2026-12-02 00:30:00" in page  # shown in the admin's zone too


def test_a_filter_that_cannot_be_read_is_named_and_ignored(client: FlaskClient, records: Records) -> None:
    ids = records.insert(
        RecordSpec(status=RecordStatus.FAILED, user_id=5), RecordSpec(status=RecordStatus.PENDING)
    )
    assert sign_in(client) == 302
    response = client.get("/admin/records?user=abc&status=9&from=2026-13-01&to=yesterday")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    for message in ("用户ID“abc”", "状态“9”", "开始日期“2026-13-01”", "结束日期“yesterday”"):
        assert message in html
    assert sorted(listed_ids(html)) == sorted(ids)
    backwards = client.get("/admin/records?from=2026-12-02&to=2026-12-01").get_data(as_text=True)
    assert "开始日期晚于结束日期" in backwards
    assert listed_ids(client.get("/admin/records?status=5&user=5").get_data(as_text=True)) == [ids[0]]


def test_the_overview_shows_delayed_jobs_and_the_oldest_wait(
    client: FlaskClient, redis_client: redis.Redis, report_broker: RedisListBroker
) -> None:
    enqueued = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    job = ReportQueueMessage.new(41, now=enqueued)
    redis_client.lpush(REPORT_QUEUE_KEY, job.encode())
    redis_client.lpush(
        REPORT_QUEUE_KEY, ReportQueueMessage.new(42, now=enqueued + timedelta(minutes=5)).encode()
    )
    # A retry as the broker stores it (`<16 hex>|<job>`): its third attempt, due in a minute.
    codec = ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)
    report_broker.enqueue(codec.decode(job.retried(2).encode().encode()), delay=60_000)

    # The consumer's end of the list holds the oldest job; a retry keeps its first EnqueueTime.
    assert (
        oldest_age_s(redis_client, REPORT_QUEUE_KEY, now=(enqueued + timedelta(seconds=90)).timestamp()) == 90
    )
    total, (retry,) = RedisQueueOperations(redis_client).delayed_retries(0, 20)
    assert (total, retry.record_id, retry.attempts, retry.enqueued_at) == (1, 41, 2, enqueued)
    assert retry.message_id is not None

    assert sign_in(client) == 302
    html = client.get("/admin/").get_data(as_text=True)
    assert re.search(r'data-figure="queued">2<', html)
    assert re.search(r'data-figure="delayed">1<', html)
    assert f'<tr data-delayed="{retry.message_id}">' in html
    assert local_time(retry.due_at, ZoneInfo("Asia/Shanghai")) in html  # the due time, in Shanghai
    assert '<a href="/admin/records/41">41</a>' in html
    assert re.search(r'data-figure="oldest">3 小时 \d+ 分<', html)


def test_the_record_detail_has_answers_report_and_reasons(
    client: FlaskClient, records: Records, session_factory: sessionmaker[Session], engine: Engine
) -> None:
    (record_id,) = records.insert(RecordSpec(status=RecordStatus.COMPLETED, results=True, deleted=True))
    detail = admin_record_detail(UnitOfWork(session_factory), record_id)
    assert detail.is_deleted
    assert len(detail.dimensions) == 8
    assert sorted(d.rank for d in detail.dimensions) == list(range(1, 9))
    assert len(detail.answers) == len(load_questionnaire().questions)
    assert sign_in(client) == 302
    html = client.get(f"/admin/records/{record_id}").get_data(as_text=True)
    assert "已删除" in html
    assert html.count("<tr><td>") >= 8
    # The report page's radar chart (web/radar.py), above the table.
    assert '<figure class="radar">' in html
    assert "<svg" in html
    assert all(d.name in html for d in detail.dimensions)
    assert detail.dimensions[0].interpretation  # the same texts the user reads
    assert "重新生成报告" not in html  # completed and deleted: nothing to regenerate
    missing = client.get("/admin/records/999999")
    assert missing.status_code == 404
    assert "记录不存在" in missing.get_data(as_text=True)


def test_wrong_tokens_of_an_address_wait_longer_and_longer_and_the_right_one_never_waits(
    client: FlaskClient, redis_client: redis.Redis, app: Flask
) -> None:
    for _ in range(FREE_ATTEMPTS):
        assert sign_in(client, token="wrong") == 401
    # The last free failure set a 1 s wait: a wrong token now is refused and told when to come back.
    response = client.post(
        "/admin/login", data={"token": "wrong", "csrf_token": csrf_token(client, "/admin/login")}
    )
    assert response.status_code == 429
    assert 1 <= int(response.headers["Retry-After"]) <= 2
    key = Keyspace.of().console.signin_address("127.0.0.1")
    assert redis_client.hget(key, "n") == str(FREE_ATTEMPTS).encode()
    assert redis_client.hget(key, "refused") == b"1"
    assert 0 < redis_client.pttl(key) <= 15 * 60_000
    # The right token, from a fresh browser at the same address while it waits: in at once,
    # and not counted.
    assert sign_in(app.test_client()) == 302
    assert redis_client.hget(key, "n") == str(FREE_ATTEMPTS).encode()
    redis_client.hset(key, "until", 0)  # the wait passed
    assert sign_in(client, token="wrong") == 401


def test_successful_sign_ins_never_count_toward_the_limit(app: Flask, redis_client: redis.Redis) -> None:
    for _ in range(3 * FREE_ATTEMPTS):
        assert sign_in(app.test_client()) == 302
    assert redis_client.keys(Keyspace.of().console.signin_address("*")) == []
    # One mistyped token after many good sign-ins is a plain 401, not "too many attempts".
    assert sign_in(app.test_client(), token="mistyped") == 401


def _signin_count(client: FlaskClient, outcome: str) -> float:
    scrape = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert scrape.status_code == 200
    match = re.search(
        rf'^mi_console_signin_attempts_total\{{outcome="{outcome}"\}} (\S+)$',
        scrape.get_data(as_text=True),
        re.M,
    )
    return float(match.group(1)) if match else 0.0


def test_guessing_shows_as_a_metric_audit_rows_and_an_alarm(
    app: Flask, redis_client: redis.Redis, event_log: Engine, session_factory: sessionmaker[Session]
) -> None:
    observer = app.test_client()
    before = {o: _signin_count(observer, o) for o in ("ok", "wrong", "refused")}
    assert sign_in(observer, name="值班") == 302
    assert "signin_guessing" not in observer.get("/admin/").get_data(as_text=True)  # one good sign-in
    guesser = app.test_client()
    answers = [sign_in(guesser, token=f"guess-{i}", name="猜") for i in range(FREE_ATTEMPTS + 7)]
    assert answers == [401] * FREE_ATTEMPTS + [429] * 7
    after = {o: _signin_count(observer, o) for o in ("ok", "wrong", "refused")}
    assert {o: after[o] - before[o] for o in after} == {"ok": 1, "wrong": FREE_ATTEMPTS, "refused": 7}
    uow = UnitOfWork(session_factory)
    assert [e.outcome for e in list_audit(uow, action="signin").items] == ["ok"]
    wrong = list_audit(uow, action="signin_wrong_token").items
    assert len(wrong) == FREE_ATTEMPTS
    assert {(e.actor, e.credential) for e in wrong} == {("console:猜", "address 127.0.0.1")}
    # Refused ones at the 1st, 2nd and 4th: rows grow with the log of the guesses.
    assert len(list_audit(uow, action="signin_refused").items) == 3
    page = observer.get("/admin/records").get_data(as_text=True)
    assert 'data-alarm="signin_guessing"' in page
    assert f"{FREE_ATTEMPTS + 7} 次错误的管理员凭证" in page
    assert "127.0.0.1" in page


def test_a_regeneration_in_the_console_is_audited_with_the_admin(
    client: FlaskClient,
    records: Records,
    redis_client: redis.Redis,
    event_log: Engine,
    session_factory: sessionmaker[Session],
) -> None:
    (record_id,) = records.insert(RecordSpec(status=RecordStatus.FAILED))
    assert sign_in(client, name="李四") == 302
    token = csrf_token(client, "/admin/records")
    response = client.post(f"/admin/records/{record_id}/regenerate", data={"csrf_token": token})
    assert response.status_code == 302
    assert records.status(record_id) == RecordStatus.GENERATING
    assert [
        ReportQueueMessage.decode(raw).record_id for raw in redis_client.lrange(REPORT_QUEUE_KEY, 0, -1)
    ] == [record_id]
    # Beside the sign-in, which the audit keeps too.
    entries = [
        e for e in list_audit(UnitOfWork(session_factory), actor="console:李四").items if e.action != "signin"
    ]
    assert [(e.action, e.ids, e.outcome) for e in entries] == [("regenerate", [record_id], "ok")]
    assert entries[0].credential.startswith("admin-token ")
    assert ADMIN_TOKEN not in entries[0].credential


def test_records_are_paged_with_their_filters_kept(client: FlaskClient, records: Records) -> None:
    ids = records.insert(*[RecordSpec(status=RecordStatus.FAILED, user_id=9) for _ in range(25)])
    records.insert(RecordSpec(status=RecordStatus.FAILED, user_id=10))
    assert sign_in(client) == 302
    first = client.get("/admin/records?user=9").get_data(as_text=True)
    assert listed_ids(first) == sorted(ids, reverse=True)[:20]
    assert "共 25 条，第 1 / 2 页" in first
    assert 'href="/admin/records?user=9&amp;page=2"' in first
    second = client.get("/admin/records?user=9&page=2").get_data(as_text=True)
    assert listed_ids(second) == sorted(ids, reverse=True)[20:]
    assert "下一页" not in second


def test_processes_show_alive_lost_or_stopped_and_the_banner_names_what_is_missing(
    client: FlaskClient, redis_client: redis.Redis
) -> None:
    now = time.time()
    alive = ProcessIdentity("worker", "host-a", 101, "0.1.0", now - 600)
    silent = ProcessIdentity("hotpath", "host-b", 202, "0.1.0", now - 600)
    stopped = ProcessIdentity("reconciler", "host-c", 303, "0.1.0", now - 600)
    write_beat(redis_client, alive, "report 42, report 43", now=now - 1, load=(2, 4))
    write_beat(redis_client, silent, "flushing answers", now=now - BEAT_TIMEOUT_S - 5)
    write_beat(redis_client, stopped, STOPPED, now=now - 2)
    assert sign_in(client) == 302
    html = client.get("/admin/").get_data(as_text=True)
    rows = dict(re.findall(r'<tr data-process="(\w+)" data-alive="\w+" data-state="(\w+)">', html))
    assert rows == {"worker": "alive", "hotpath": "gone", "reconciler": "stopped"}
    assert "已失联" in html
    assert "已停止" in html
    assert "生成报告：记录 42、43（2/4 线程）" in html  # what it does, in words
    assert re.search(r"忙碌 <strong>2</strong> / 共 <strong>4</strong>", html)
    assert "host-b" in html
    # The hotpath is lost: every page's banner says so (the worker is alive: no alarm for it).
    alarms = re.findall(r'<li data-alarm="(\w+)">', client.get("/admin/records").get_data(as_text=True))
    assert alarms == ["no_hotpath"]


def test_the_overview_refreshes_only_when_asked_at_a_listed_interval(client: FlaskClient) -> None:
    assert sign_in(client) == 302
    assert 'http-equiv="refresh" content="10"' in client.get("/admin/?refresh=10").get_data(as_text=True)
    for refresh in ("", "7", "0", "abc", "-5", "²", "10 "):
        response = client.get("/admin/", query_string={"refresh": refresh})
        assert response.status_code == 200, refresh
        assert "http-equiv" not in response.get_data(as_text=True), refresh


def test_behind_trusted_proxies_each_client_address_has_its_own_limit(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """TRUSTED_PROXIES=1: the address is X-Forwarded-For's last entry (what the proxy saw);
    without it the header is ignored, so a client cannot pick the bucket it is counted in."""
    for proxies, expected in ((1, {"198.51.100.7", "198.51.100.8"}), (0, {"127.0.0.1"})):
        clean_redis(redis_client)
        app = create_app(settings.with_overrides(trusted_proxies=proxies), redis_client=redis_client)
        for address in ("198.51.100.7", "198.51.100.8"):
            client = app.test_client()
            headers = {"X-Forwarded-For": f"203.0.113.1, {address}"}
            token = CSRF.search(client.get("/admin/login", headers=headers).get_data(as_text=True))
            assert token
            client.post(
                "/admin/login", data={"token": "wrong", "csrf_token": token.group(1)}, headers=headers
            )
        prefix = Keyspace.of().console.signin_address("")
        keys = bytes_list(redis_client.keys(prefix + "*"))
        buckets = {key.decode().removeprefix(prefix) for key in keys}
        assert buckets == expected, proxies


def test_a_batch_action_redirects_to_its_outcome_and_a_reload_repeats_nothing(
    client: FlaskClient,
    records: Records,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    """POST, redirect, GET: the outcome is a page of its own, kept with the session."""
    failed, done = records.insert(
        RecordSpec(status=RecordStatus.FAILED), RecordSpec(status=RecordStatus.COMPLETED)
    )
    assert sign_in(client, name="王五") == 302
    token = csrf_token(client, "/admin/records")
    response = client.post("/admin/records/regenerate", data={"csrf_token": token, "ids": [failed, done]})
    assert response.status_code == 302
    location = response.headers["Location"]
    assert re.fullmatch(r"/admin/outcomes/[0-9a-f]+", location), location
    for _ in range(3):  # the page, then two reloads
        page = client.get(location)
        assert page.status_code == 200
        html = page.get_data(as_text=True)
        assert "批量重新生成结果" in html
        assert f'data-outcome-id="{failed}" data-outcome="regenerated"' in html
        assert f'data-outcome-id="{done}" data-outcome="skipped"' in html
    assert redis_client.llen(REPORT_QUEUE_KEY) == 1  # one job: the action ran once
    entries = list_audit(UnitOfWork(session_factory), actor="console:王五").items
    assert [e.action for e in entries if e.action != "signin"] == ["batch_regenerate"]  # beside the sign-in
    # Another session cannot read it, nor can an id that was never kept.
    other = client.application.test_client()
    assert sign_in(other, name="赵六") == 302
    assert other.get(location).status_code == 404
    gone = client.get("/admin/outcomes/0123abcd")
    assert gone.status_code == 404
    assert "只保留最近" in gone.get_data(as_text=True)


def test_a_refused_action_is_said_on_its_forms_page_after_a_redirect(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    assert sign_in(client, name="孙七") == 302
    token = csrf_token(client, "/admin/dead")
    response = client.post("/admin/dead/requeue", data={"csrf_token": token, "ids": ["not a handle!"]})
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/dead"
    assert "操作未完成" in client.get("/admin/dead").get_data(as_text=True)
    entries = list_audit(UnitOfWork(session_factory), actor="console:孙七").items
    assert [e.action for e in entries] == ["signin"]  # the action was refused before it ran


def test_an_unknown_console_address_is_a_page_with_the_navigation(client: FlaskClient) -> None:
    anonymous = client.get("/admin/no-such-page")
    assert anonymous.status_code == 404
    assert "退出登录" not in anonymous.get_data(as_text=True)
    assert sign_in(client) == 302
    missing = client.get("/admin/no-such-page")
    assert missing.status_code == 404
    html = missing.get_data(as_text=True)
    assert "页面不存在" in html
    assert "接口不存在" not in html  # the API's word
    assert "退出登录" in html
    assert 'href="/admin/records"' in html  # the navigation
