"""The fault drill: make chosen records' report generation fail on purpose, for a while.

Operators rehearse what a failing generation looks like (failed attempts on the record's
timeline, retries waiting in the delayed table, then a dead letter and status 5) without
breaking anything else: the worker checks the drill before each generation and, for a
record in it, fails the attempt with `FaultDrillFailure`, which then takes the product's
own path (the 10/30/60 s retries, the dead letter). Each record's drill ends by itself
after its duration (at most a day), so a forgotten drill cannot fail records for ever.
Starting and stopping are audited like every admin action.

The drill lives in Redis (redis_adapters/drill_store.py implements `FaultDrill`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from services.domain.errors import ParamError, QueueUnavailable
from services.domain.limits import MAX_ID, is_id, is_strict_int
from services.domain.opsmodel import AdminActor, AuditLog
from services.usecases.audit import begin_action

#: Longest and default duration of a drill, in minutes.
MAX_DRILL_MINUTES = 24 * 60
DEFAULT_DRILL_MINUTES = 60
#: Records one call may put into the drill.
MAX_DRILL_RECORDS = 1000
#: The error text of a drilled attempt (the timeline and the dead letter show it).
DRILL_ERROR = "故障演练：记录 {record_id} 的报告生成按演练设定失败"


class FaultDrillFailure(Exception):
    """What a drilled attempt fails with: the error of a FAILED generation of a record in the
    drill (services/usecases/report_groups.py dates it when the drill decided)."""


@dataclass(frozen=True)
class DrilledRecord:
    record_id: int
    until: datetime  # aware UTC: the drill of this record ends then


class FaultDrill(Protocol):
    """Where the drill is kept. Raises `services.domain.errors.QueueUnavailable` when it cannot be reached."""

    def add(self, record_ids: Sequence[int], until: datetime) -> None: ...

    def remove(self, record_ids: Sequence[int] | None) -> list[int]:
        """End the drill of these records (None: of all); the ids that were in it."""

    def active(self) -> list[DrilledRecord]:
        """The records in the drill now, by id."""


def _ids(record_ids: Sequence[int]) -> list[int]:
    if not record_ids:
        raise ParamError("记录ID列表不能为空")
    if len(record_ids) > MAX_DRILL_RECORDS or not all(is_id(r) for r in record_ids):
        raise ParamError(f"记录ID必须是 1 到 {MAX_DRILL_RECORDS} 个 1 到 {MAX_ID} 之间的整数")
    return sorted(set(record_ids))


def start_fault_drill(
    drill: FaultDrill,
    audit: AuditLog,
    actor: AdminActor,
    record_ids: Sequence[int],
    *,
    minutes: int = DEFAULT_DRILL_MINUTES,
    now: datetime | None = None,
) -> list[DrilledRecord]:
    """Make the generation of these records fail for `minutes` (1 to a day); audited as
    `drill_start`. A record already in the drill gets the new end. Takes effect at once:
    the worker reads the drill before each attempt."""
    ids = _ids(record_ids)
    if not is_strict_int(minutes) or not 1 <= minutes <= MAX_DRILL_MINUTES:
        raise ParamError(f"演练时长（分钟）必须是 1 到 {MAX_DRILL_MINUTES} 之间的整数")
    until = (now or datetime.now(UTC)) + timedelta(minutes=minutes)
    trail = begin_action(audit, actor, "drill_start", ids, detail=f"{minutes} min, until {until.isoformat()}")
    try:
        drill.add(ids, until)
    except QueueUnavailable:
        trail.finish("failed", detail="drill unavailable")
        raise
    trail.finish("ok", detail=f"{minutes} min, until {until.isoformat()}")
    return [DrilledRecord(r, until) for r in ids]


def stop_fault_drill(
    drill: FaultDrill, audit: AuditLog, actor: AdminActor, record_ids: Sequence[int] | None
) -> list[int]:
    """End the drill of these records (None: of every record); the ids that were in it.
    Audited as `drill_stop`."""
    ids = None if record_ids is None else _ids(record_ids)
    trail = begin_action(audit, actor, "drill_stop", ids or [], detail="all" if ids is None else None)
    try:
        removed = drill.remove(ids)
    except QueueUnavailable:
        trail.finish("failed", detail="drill unavailable")
        raise
    trail.finish(
        "ok",
        detail=("all; " if ids is None else "") + f"{len(removed)} stopped",
        ids=removed if ids is None else ids,
    )
    return removed


def list_fault_drill(drill: FaultDrill) -> list[DrilledRecord]:
    return drill.active()
