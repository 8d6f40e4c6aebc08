"""The web tier's lean baseline: a minimal WSGI app doing a submission's
work by hand, to measure the product's web line against (bench/web_tier.py).

    gunicorn bench.web_baseline:app --worker-class gthread --threads 64 ...

The three calls of a submission, with the product's paths, bodies and answers (the JSON
envelope, the record's fields), and the same writes:

- `createRecord`: one INSERT, autocommitted (one round trip), its `record.created` event inserted
  into `event_log` by the same statement, as the product does;
- `startAssessment`: one UPDATE of the caller's record from 1 (or 2) to 2, autocommitted, its
  `record.started` event inserted by the same statement;
- `submitAnswers`: one transaction in two round trips, as the product's: BEGIN and the record
  locked (``FOR UPDATE``) in the first, its status checked; then, pipelined with the COMMIT, its
  answers replaced (DELETE, one INSERT of the 40 rows from two arrays), the record set to 3
  (RETURNING submitted_at) and the `answers.submitted` row inserted into `event_log` (the product
  writes it in the submission's transaction too); then the job's LPUSH in the .NET wire format.

Its round trips are the product's (1, 1 and 2): a baseline that ran each single statement in a
transaction of its own and gave the submission's lock and COMMIT a round trip each (3, 3 and 4)
would flatter the product.

Users are authenticated as the product does (the same signed tokens, checked with
`web.auth.verify_user_token`), each body is validated (40 answers to the active questions,
values 1..5). Left out, because they are the product's own and not a submission's writes:
the autosave store (sealed and released around a submission, primed at the start), the job
index beside the LPUSH, the event sink's fallbacks and spool, request logging and metrics,
and the `/api/health` availability gate. A baseline is the leanest honest way to do the same
work; what it leaves out, the product pays for.

At most as many psycopg connections per process as the product's pool opens
(`DB_POOL_SIZE` + `DB_MAX_OVERFLOW`: 10 by default), opened as needed and kept (a list and a
semaphore), one redis-py client per process. A connection per thread would open up to
`WEB_CONCURRENCY × WEB_THREADS` of them: with `--workers 4`, beyond PostgreSQL's default 100
with the other sides' (the product's startAssessment then failed with "too many clients").
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import redis

from config.settings import Settings
from services.domain.limits import is_id
from web.auth import verify_user_token

REPORT_QUEUE = "report:queue"
STATUS_TEXT = {1: "待测评", 2: "测评中", 3: "生成中", 4: "已完成", 5: "生成失败"}

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

#: Connections of this process not in use; `_slots` bounds those open as the product's pool
#: is bounded (its settings; no overflow given is as many again: services/persistence/db.py).
_idle: list[psycopg.Connection[Any]] = []
_settings = Settings.from_env()
_slots = threading.BoundedSemaphore(
    _settings.db_pool_size
    + (_settings.db_pool_size if _settings.db_max_overflow is None else _settings.db_max_overflow)
)
_redis = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
_secret = os.environ.get("SECRET_KEY", "")
#: The active question ids, read once per process.
_active: dict[str, frozenset[int]] = {}
_active_lock = threading.Lock()


@contextmanager
def _connection() -> Iterator[psycopg.Connection[Any]]:
    """A connection of the process's own (waiting for one when all are in use); one that failed
    is closed, not kept."""
    with _slots:
        try:
            conn = _idle.pop()
        except IndexError:
            conn = psycopg.connect(
                os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://"),
                autocommit=True,
            )
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        _idle.append(conn)


def _active_questions(conn: psycopg.Connection[Any]) -> frozenset[int]:
    with _active_lock:
        if "ids" not in _active:
            rows = conn.execute("SELECT id FROM questions WHERE is_active")
            _active["ids"] = frozenset(r[0] for r in rows)
        return _active["ids"]


def _reply(start: StartResponse, status: str, code: int, message: str, data: Any = None) -> Iterable[bytes]:
    body = json.dumps({"code": code, "message": message, "data": data}, ensure_ascii=False).encode()
    start(status, [("Content-Type", "application/json; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    record_id, user_id, status, created_at, started_at, submitted_at, completed_at = row
    return {
        "id": record_id,
        "userId": user_id,
        "status": status,
        "statusText": STATUS_TEXT[status],
        "createdAt": created_at.isoformat(),
        "startedAt": started_at.isoformat() if started_at else None,
        "submittedAt": submitted_at.isoformat() if submitted_at else None,
        "completedAt": completed_at.isoformat() if completed_at else None,
    }


_COLUMNS = "id, user_id, status, created_at, started_at, submitted_at, completed_at"


def _logged(event_type: str, rows: str) -> str:
    """A data-modifying CTE: `event_type`'s event for the record of `rows`, as the product's."""
    return (
        "INSERT INTO event_log (id, occurred_at, event_type, record_id, user_id, actor, data)"
        f" SELECT gen_random_uuid(), now(), '{event_type}', id, user_id, %(actor)s, '{{}}'::jsonb"
        f" FROM {rows}"
    )


def create_record(user_id: int, body: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
    with _connection() as conn:
        row = conn.execute(
            "WITH added AS (INSERT INTO assessment_records (user_id) VALUES (%(user)s)"
            f" RETURNING {_COLUMNS}), logged AS ({_logged('record.created', 'added')}) SELECT * FROM added",
            {"user": user_id, "actor": f"user:{user_id}"},
        ).fetchone()
    assert row is not None
    return _reply(start, "200 OK", 0, "成功", _record(row))


def start_assessment(user_id: int, body: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
    record_id = body.get("recordId")
    if not is_id(record_id):
        return _reply(start, "400 BAD REQUEST", 1001, "recordId 必须是正整数")
    with _connection() as conn:
        row = conn.execute(
            "WITH started AS (UPDATE assessment_records SET status = 2,"
            " started_at = COALESCE(started_at, now()), updated_at = now()"
            " WHERE id = %(id)s AND user_id = %(user)s AND NOT is_deleted AND status IN (1, 2)"
            f" RETURNING {_COLUMNS}), logged AS ({_logged('record.started', 'started')})"
            " SELECT * FROM started",
            {"id": record_id, "user": user_id, "actor": f"user:{user_id}"},
        ).fetchone()
    if row is None:
        return _reply(start, "409 CONFLICT", 2005, "当前状态不允许开始测评")
    return _reply(start, "200 OK", 0, "成功", _record(row))


def submit_answers(user_id: int, body: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
    record_id = body.get("recordId")
    answers = body.get("answers")
    if not is_id(record_id):
        return _reply(start, "400 BAD REQUEST", 1001, "recordId 必须是正整数")
    with _connection() as conn:
        active = _active_questions(conn)
        values: dict[int, int] = {}
        for answer in answers if isinstance(answers, list) else ():
            question, value = answer.get("questionId"), answer.get("value")
            if (
                question not in active
                or not isinstance(value, int)
                or not 1 <= value <= 5
                or question in values
            ):
                return _reply(start, "400 BAD REQUEST", 1001, "答案不合法")
            values[question] = value
        if len(values) != len(active):
            return _reply(start, "400 BAD REQUEST", 1001, "答案不完整")
        # In pipeline mode BEGIN goes with the lock's SELECT, and the COMMIT with the writes.
        with conn.pipeline(), conn.transaction():
            locked = conn.execute(
                "SELECT status FROM assessment_records"
                " WHERE id = %s AND user_id = %s AND NOT is_deleted FOR UPDATE",
                (record_id, user_id),
            ).fetchone()
            if locked is None or locked[0] not in (1, 2):
                return _reply(start, "409 CONFLICT", 2005, "当前状态不允许提交答案")
            event_id = uuid.uuid4()
            conn.execute("DELETE FROM answers WHERE record_id = %s", (record_id,))
            conn.execute(
                "INSERT INTO answers (record_id, question_id, value)"
                " SELECT %s, q, v FROM unnest(%s::int[], %s::smallint[]) AS t(q, v)",
                (record_id, list(values), list(values.values())),
            )
            cursor = conn.execute(
                "UPDATE assessment_records SET status = 3, submitted_at = now(), answered_count = %s,"
                " last_activity_at = now(), updated_at = now() WHERE id = %s RETURNING submitted_at",
                (len(values), record_id),
            )
            conn.execute(
                "INSERT INTO event_log (id, occurred_at, event_type, record_id, user_id, actor, data)"
                " VALUES (%s, now(), 'answers.submitted', %s, %s, %s, '{}')",
                (event_id, record_id, user_id, f"user:{user_id}"),
            )
        submitted = cursor.fetchone()
    assert submitted is not None
    message = {
        "RecordId": record_id,
        "RetryCount": 0,
        "EnqueueTime": datetime.now().astimezone().isoformat(timespec="microseconds"),
    }
    _redis.lpush(REPORT_QUEUE, json.dumps(message, separators=(",", ":")))
    return _reply(start, "200 OK", 0, "成功", {"recordId": record_id, "status": 3, "enqueued": True})


ROUTES = {
    "/api/assessment/createRecord": create_record,
    "/api/assessment/startAssessment": start_assessment,
    "/api/assessment/submitAnswers": submit_answers,
}


def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
    handler = ROUTES.get(environ.get("PATH_INFO", ""))
    if handler is None or environ.get("REQUEST_METHOD") != "POST":
        return _reply(start, "404 NOT FOUND", 3241, "not found")
    scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    user_id = verify_user_token(_secret, token.strip()) if scheme.lower() == "bearer" else None
    if user_id is None:
        return _reply(start, "401 UNAUTHORIZED", 1002, "缺少身份凭证")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
    except ValueError:
        return _reply(start, "400 BAD REQUEST", 1001, "请求体不是 JSON")
    if not isinstance(body, dict):
        return _reply(start, "400 BAD REQUEST", 1001, "请求体不是 JSON 对象")
    try:
        return handler(user_id, body, start)
    except (psycopg.OperationalError, redis.RedisError):
        return _reply(start, "503 SERVICE UNAVAILABLE", 5003, "服务暂不可用")
