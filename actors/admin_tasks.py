"""The admin tasks' actor: regenerates every record matching a filter, page by page
(services/usecases/regeneration_tasks.py), on the `admin` queue.

Declared as an `ActorSpec` (importing this module builds no broker); `actors.worker`
declares it next to the report actor. A worker killed mid-task has its message
redelivered by the broker's reaper and the task resumes at its cursor; a failure is
retried on the actor's schedule, and a task whose attempts are used up is marked failed.
While PostgreSQL is down the message waits behind the availability gate, as report jobs do.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import dramatiq
from listbroker import DependencyUnavailable, actor_spec

from actors import bootstrap
from redis_adapters.queues import (
    ADMIN_QUEUE_NAME,
    MAX_RETRY_COUNT,
    REGENERATE_MATCHING_ACTOR_NAME,
    RETRY_DELAYS_MS,
)
from services.domain.errors import DatabaseUnavailable
from services.usecases.regeneration_tasks import TaskState, run_task

logger = logging.getLogger(__name__)

#: Longest one run of a task may take (100,000 records take well under a minute).
TASK_TIME_LIMIT_MS = 60 * 60_000


def mark_task_failed(message: dramatiq.Message[Any]) -> None:
    """on_dead_letter hook: the task's attempts are used up."""
    task_id = str(message.args[0])
    bootstrap.services().tasks.finished(
        task_id, TaskState.FAILED, datetime.now(UTC), "attempts used up; see the worker log"
    )
    logger.error("regeneration task %s failed after %d retries", task_id, MAX_RETRY_COUNT)


@actor_spec(
    actor_name=REGENERATE_MATCHING_ACTOR_NAME,
    queue_name=ADMIN_QUEUE_NAME,
    max_retries=MAX_RETRY_COUNT,
    # The default schedule; the worker declares it with REPORT_RETRY_DELAYS_MS's (actors/worker.py).
    retry_delays=RETRY_DELAYS_MS,
    on_dead_letter=mark_task_failed,
    time_limit=TASK_TIME_LIMIT_MS,
)
def regenerate_matching(task_id: str) -> None:
    made = bootstrap.services()
    try:
        run_task(made.uow, made.report_queue, made.dead_letters, made.tasks, task_id)
    except DatabaseUnavailable as exc:
        # Not an attempt: the gate holds the task until PostgreSQL answers (broker/src/listbroker/gate.py).
        raise DependencyUnavailable(str(exc)) from exc
