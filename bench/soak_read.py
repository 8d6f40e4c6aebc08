"""What the soak's checker reads: only what the product stores.

PostgreSQL (the records, their answers, reports and dimension results, the event log), the
Redis keys docs/queue.md and docs/hotpath.md document (`report:queue:jobs`, `eventlog:queue`), the admin API
(`/api/admin/queue/stats`) and the user API (`GET /api/assessment/record`, what resuming
shows), all after settling: every record owed a report has its final status, the queues
and the event log's list are empty. Plus the processes' RSS and open fds from /proc.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.soak_check import EventRow, Sample, StoredRecord
from redis_adapters.event_spool import SPOOL_SUFFIX
from redis_adapters.keyspace import EventLogKeys, Keyspace

PAGE_SIZE = 4096


def stored_records(database_url: str) -> dict[int, StoredRecord]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id, status, extract(epoch FROM completed_at)::float8 FROM assessment_records"
        ).fetchall()
        reports: dict[int, int] = dict(
            conn.execute("SELECT record_id, count(*) FROM report_summaries GROUP BY 1").fetchall()
        )
        dims: dict[int, int] = dict(
            conn.execute("SELECT record_id, count(*) FROM dimension_results GROUP BY 1").fetchall()
        )
        answers: dict[int, dict[int, int]] = {}
        for record_id, question_id, value in conn.execute(
            "SELECT record_id, question_id, value FROM answers"
        ):
            answers.setdefault(int(record_id), {})[int(question_id)] = int(value)
    return {
        int(rid): StoredRecord(
            int(rid),
            int(status),
            int(reports.get(rid, 0)),
            int(dims.get(rid, 0)),
            answers.get(int(rid), {}),
            None if completed is None else float(completed),
        )
        for rid, status, completed in rows
    }


def stored_events(database_url: str) -> list[EventRow]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id::text, event_type, extract(epoch FROM occurred_at)::float8, record_id, data"
            " FROM event_log WHERE event_type NOT LIKE 'admin.%'"
        ).fetchall()
    return [
        EventRow(str(i), str(t), float(at), None if r is None else int(r), dict(d or {}))
        for i, t, at, r, d in rows
    ]


def job_index(redis_url: str) -> dict[int, str]:
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    raw: dict[bytes, bytes] = client.hgetall(Keyspace.of().report.jobs)  # type: ignore[assignment]
    return {int(k): v.decode() for k, v in raw.items() if k.isdigit()}


def settled(
    database_url: str, redis_url: str, queue_stats: Callable[[], dict[str, Any]], spool: Path | None = None
) -> str | None:
    """None when nothing is owed or in flight; else what still is. `spool`: the stack's
    EVENT_SPOOL_DIR, whose files hold the events processes still hold (or ended holding)."""
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM assessment_records WHERE status = 3 AND NOT is_deleted"
        ).fetchone()
    owed = int(row[0]) if row else 0
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    keys = EventLogKeys()
    # The consumer's batch in flight too: taken from the queue, not yet stored.
    events = int(client.llen(keys.queue)) + int(client.llen(keys.backup))
    if spool is not None:
        events += sum(len(path.read_bytes().splitlines()) for path in spool.glob(f"*{SPOOL_SUFFIX}"))
    stats = queue_stats()
    busy = {k: stats.get(k) for k in ("queued", "inFlight", "delayed")}
    if owed or events or any(busy.values()):
        return (
            f"{owed} record(s) in status 3, {events} event(s) in eventlog:queue, :backup or spooled, "
            f"queue {busy}"
        )
    return None


def wait_settled(
    database_url: str,
    redis_url: str,
    queue_stats: Callable[[], dict[str, Any]],
    timeout: float,
    spool: Path | None = None,
) -> tuple[float, str | None]:
    """Seconds it took to settle, and what was still owed if it did not within `timeout`."""
    began = time.monotonic()
    state: str | None = "not checked"
    while time.monotonic() - began < timeout:
        try:
            state = settled(database_url, redis_url, queue_stats, spool)
        except Exception as exc:  # a server still coming back
            state = repr(exc)
        if state is None:
            return time.monotonic() - began, None
        time.sleep(1.0)
    return time.monotonic() - began, state


PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def sample(pid: int) -> Sample | None:
    """RSS and open fds of a process now (None when it is gone)."""
    try:
        rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError, IndexError):
        return None
    return Sample(time.time(), rss_pages * PAGE_KB, fds)
