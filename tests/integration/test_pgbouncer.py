"""The pipeline behind PgBouncer in transaction-pooling mode (DB_TRANSACTION_POOLING=1).

Web app and a `dramatiq actors.worker` process reach PostgreSQL only through a private
PgBouncer (tests/support/pgbouncer.py) whose three server connections are shared by
every client transaction: a query that relied on session state (a prepared statement,
a SET, a session advisory lock) would meet a server session that never saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
import redis
from listbroker.keys import HEARTBEATS_KEY
from listbroker.scripts import DELAYED_PREFIX_LEN
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from redis_adapters.queues import REPORT_DELAYED_KEY, RETRY_DELAYS_MS
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.status import RecordStatus
from services.persistence.db import make_engine
from tests.support.binaries import needs
from tests.support.envelope import data
from tests.support.pgbouncer import PgBouncer, pgbouncer_binary
from tests.support.processes import WorkerProcess, wait_until
from tests.support.record_state import completed_at, statuses
from tests.support.stack import add_answers
from tests.support.submissions import answer_sheet, submit
from tests.support.web_app import USER_PATH
from web import create_app, issue_user_token

pytestmark = [
    pytest.mark.slow,
    needs(pgbouncer_binary(), "pgbouncer"),
]

#: More than psycopg's prepare threshold (5) runs of each query on each connection.
RECORDS = 12
USER = 1001


@pytest.fixture
def bouncer(settings: Settings, engine: Engine) -> Iterator[PgBouncer]:
    server = PgBouncer(settings.database_url)
    try:
        yield server.start()
    finally:
        server.stop()


def delayed_retry_counts(client: redis.Redis) -> list[int]:
    members: list[bytes] = list(client.zrange(REPORT_DELAYED_KEY, 0, -1))  # type: ignore[arg-type]
    return [ReportQueueMessage.decode(member[DELAYED_PREFIX_LEN:]).retry_count for member in members]


def test_submit_report_and_a_retry_through_pgbouncer(
    bouncer: PgBouncer,
    settings: Settings,
    engine: Engine,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    pooled = settings.with_overrides(
        database_url=Settings.from_env({"DATABASE_URL": bouncer.url}).database_url,
        db_transaction_pooling=True,
    )
    worker = WorkerProcess(
        database_url=pooled.database_url,
        redis_url=settings.redis_url,
        log_path=tmp_path / "worker.log",
        threads=4,
        env={"DB_TRANSACTION_POOLING": "1"},
    )
    try:
        wait_until(lambda: redis_client.zcard(HEARTBEATS_KEY) > 0, timeout=30, what="the worker to consume")
        web = create_app(pooled, redis_client=redis_client).test_client()
        headers = {"Authorization": f"Bearer {issue_user_token(settings.secret_key, USER)}"}
        answers = answer_sheet(web, headers)
        submitted = [submit(web, headers, answers)[0] for _ in range(RECORDS)]

        # A retry: the first attempt fails (no answers), the answers arrive, the retry completes it.
        failing = make_record(RecordStatus.GENERATING, answers={})
        RedisReportQueue(redis_client).enqueue(failing)
        wait_until(lambda: delayed_retry_counts(redis_client) == [1], timeout=60, what="the first retry")
        [(_, due_ms)] = cast(
            list[tuple[bytes, float]], redis_client.zrange(REPORT_DELAYED_KEY, 0, -1, withscores=True)
        )
        add_answers(engine, failing)

        everything = [*submitted, failing]
        wait_until(
            lambda: set(statuses(session_factory, everything).values()) == {RecordStatus.COMPLETED},
            timeout=RETRY_DELAYS_MS[0] / 1000 + 60,
            what=f"every record to complete behind pgbouncer\n{worker.output()}",
            interval=0.2,
        )
        # The retry kept its delay: completed no earlier than the due time the broker recorded.
        assert completed_at(session_factory, failing) >= datetime.fromtimestamp(due_ms / 1000, UTC)
        owner = {"Authorization": f"Bearer {issue_user_token(settings.secret_key, 1)}"}  # make_record's user
        for record_id, who in [*((r, headers) for r in submitted), (failing, owner)]:
            report = data(
                web.get(f"{USER_PATH}/report?recordId={record_id}", headers=who)
            )  # through PgBouncer too
            assert report["recordId"] == record_id
        assert "prepared statement" not in worker.output()
        assert "ERROR" not in bouncer.output()
    finally:
        worker.stop()


def test_transaction_pooling_turns_off_server_side_prepared_statements(bouncer: PgBouncer) -> None:
    pooled = make_engine(bouncer.url, pool_size=1, transaction_pooling=True)
    plain = make_engine(bouncer.url, pool_size=1)
    try:
        with pooled.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
        with plain.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold == 5  # type: ignore[union-attr]
    finally:
        pooled.dispose()
        plain.dispose()
