"""The overview page: where the report jobs are, which processes are alive, the last hour.

The queue's panels read Redis apart from the rest: a failed read blanks them with a
message, the page itself still answers. (With Redis down altogether the console answers
503 before this page: its sessions live there.) An entry that cannot be read is shown as
such (a due time "—", a count of unreadable heartbeats), never an error of the page.
"""

from __future__ import annotations

import logging

import redis
from flask import render_template, request

from actors.adapters import queue_figures
from actors.adapters.liveness import BEAT_TIMEOUT_S, live_processes, unreadable_beats
from actors.adapters.queue_peek import delayed_jobs, oldest_waiting_age_s
from actors.adapters.throughput import last_hour
from web.console.blueprint import bp
from web.console.chart import throughput_svg
from web.console.display import admin_timezone
from web.deps import current, redis_client

log = logging.getLogger(__name__)

MSG_REDIS_DOWN = "无法读取队列数据（Redis 不可用）"


#: Refresh intervals an admin may pick for the overview (seconds; none by default).
REFRESH_CHOICES = (5, 10, 30)


@bp.get("/")
def overview() -> str:
    client = redis_client()
    tz = admin_timezone(current().settings)
    figures = delayed = oldest = None
    queue_error: str | None = None
    try:
        keys = current().keys
        figures = queue_figures(client, hash_tag=keys.hash_tags)
        delayed = delayed_jobs(client, key=keys.report.delayed)
        oldest = oldest_waiting_age_s(client, key=keys.report.queue)
    except redis.RedisError as exc:
        log.warning("console overview: queue figures unavailable: %s", exc)
        queue_error = MSG_REDIS_DOWN
    processes = minutes = None
    unreadable = 0
    if queue_error is None:
        try:
            processes = live_processes(client)
            unreadable = unreadable_beats(client)
            minutes = last_hour(client)
        except redis.RedisError as exc:
            log.warning("console overview: processes or throughput unavailable: %s", exc)
            queue_error = MSG_REDIS_DOWN
    refresh = request.args.get("refresh", "")
    return render_template(
        "console/overview.html",
        refresh=next((c for c in REFRESH_CHOICES if refresh == str(c)), None),
        refresh_choices=REFRESH_CHOICES,
        figures=figures,
        delayed=delayed,
        oldest_age_s=oldest,
        queue_error=queue_error,
        processes=processes,
        unreadable_beats=unreadable,
        beat_timeout_s=BEAT_TIMEOUT_S,
        chart=throughput_svg(minutes, tz) if minutes is not None else None,
        totals={
            name: sum(getattr(m, name) for m in minutes or [])
            for name in ("processed", "failed", "retried", "dead")
        },
    )
