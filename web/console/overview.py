"""The overview page: where the jobs of every queue are, which processes are alive, the last hour.

Each panel reads on its own: Redis down blanks the queue panels with a message (and the
banner says so), the page itself still answers. An entry that cannot be read is shown as
such (a due time "—", a count of unreadable heartbeats), never an error of the page.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis
from flask import render_template, request

from observability.liveness import BEAT_TIMEOUT_S, ProcessState, unreadable_beats
from observability.throughput import HISTORY_DAYS, history, last_hour, totals
from services.domain.errors import QueueUnavailable
from services.usecases import operations
from web.console.blueprint import bp
from web.console.chart import by_day, day_label, throughput_svg
from web.console.context import pipeline_health
from web.console.display import admin_timezone
from web.deps import current, queue_operations, redis_client

log = logging.getLogger(__name__)

MSG_REDIS_DOWN = "无法读取队列数据（Redis 不可用）"

#: Refresh intervals an admin may pick for the overview (seconds; none by default).
REFRESH_CHOICES = (5, 10, 30)
#: Delayed retries shown on the overview (the next due; all of them on their own page).
DELAYED_PREVIEW = 5
#: Order of the processes table: the living first, then the lost, then the cleanly stopped.
_STATE_ORDER = {ProcessState.ALIVE: 0, ProcessState.GONE: 1, ProcessState.STOPPED: 2}


@bp.get("/")
def overview() -> str:
    tz = admin_timezone(current().settings)
    health = pipeline_health()
    queue_error = MSG_REDIS_DOWN if health is None else None
    delayed = minutes = since_start = hours = None
    unreadable = 0
    if health is not None:
        try:
            delayed = operations.list_delayed_retries(None, queue_operations(), limit=DELAYED_PREVIEW)
            unreadable = unreadable_beats(redis_client())
            minutes = last_hour(redis_client())
            hours = history(redis_client())
            since_start = totals(redis_client())
        except (redis.RedisError, QueueUnavailable) as exc:
            log.warning("console overview: delayed retries or throughput unavailable: %s", exc)
            queue_error = MSG_REDIS_DOWN
    processes = None
    workers = []
    if health is not None:
        processes = sorted(health.processes, key=lambda p: (_STATE_ORDER[p.state], p.kind, p.host, p.pid))
        workers = [p for p in health.processes if p.kind == "worker" and p.alive]
    refresh = request.args.get("refresh", "")
    return render_template(
        "console/overview.html",
        refresh=next((c for c in REFRESH_CHOICES if refresh == str(c)), None),
        refresh_choices=REFRESH_CHOICES,
        queues=health.queues if health is not None and queue_error is None else None,
        report=health.queue("report") if health is not None and queue_error is None else None,
        delayed=delayed,
        queue_error=queue_error,
        processes=processes,
        unreadable_beats=unreadable,
        busy=sum(p.busy or 0 for p in workers),
        capacity=sum(p.capacity or 0 for p in workers),
        beat_timeout_s=BEAT_TIMEOUT_S,
        alarm_after_s=current().settings.alarm_oldest_job_s,
        chart=throughput_svg(minutes, tz) if minutes is not None else None,
        history_chart=(
            throughput_svg(
                by_day(hours, tz, HISTORY_DAYS, datetime.now(tz).date()),
                tz,
                period=f"最近 {HISTORY_DAYS} 天",
                label=day_label,
            )
            if hours is not None
            else None
        ),
        history_days=HISTORY_DAYS,
        totals={
            name: sum(getattr(m, name) for m in minutes or [])
            for name in ("processed", "failed", "retried", "dead")
        },
        since_start=since_start,
    )
