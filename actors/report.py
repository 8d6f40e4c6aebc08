"""The report actor: generates one record's report (seed: ReportGenerationService)."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq

from actors.constants import MAX_RETRY_COUNT, REPORT_ACTOR_NAME, REPORT_QUEUE_NAME, RETRY_DELAYS_MS
from services import reports
from services.db import session_factory
from services.uow import UnitOfWork

logger = logging.getLogger(__name__)

#: Longest a single generation may run before it counts as a failed attempt.
GENERATION_TIME_LIMIT_MS = 5 * 60_000


def _uow() -> UnitOfWork:
    # session_factory() is per process: built after dramatiq forks its workers.
    return UnitOfWork(session_factory())


def mark_record_failed(message: dramatiq.Message[Any]) -> None:
    """on_dead_letter hook: the record shows status 5 (生成失败) once its attempts are used up."""
    record_id = int(message.args[0])
    changed = reports.mark_generation_failed(_uow(), record_id)
    logger.error(
        "Report of record %d dead-lettered after %d retries; status 5 %s.",
        record_id,
        MAX_RETRY_COUNT,
        "set" if changed else "not set (record no longer in status 3)",
    )


@dramatiq.actor(
    actor_name=REPORT_ACTOR_NAME,
    queue_name=REPORT_QUEUE_NAME,
    max_retries=MAX_RETRY_COUNT,
    retry_delays=RETRY_DELAYS_MS,
    on_dead_letter=mark_record_failed,
    time_limit=GENERATION_TIME_LIMIT_MS,
)
def generate_report(record_id: int) -> None:
    """Generate the report; a record that is not in status 3 is acknowledged and skipped."""
    outcome = reports.generate_report(_uow(), record_id)
    logger.info("Report of record %d: %s.", record_id, outcome)
