"""The audit trail of admin actions: written straight to PostgreSQL, read back filtered.

An entry is an event of the event log (`event_log`, type ``admin.<action>``, the route
`Route.AUDIT`: docs/events.md) written by a unit of work of its own, not through Redis: an
audit must survive a Redis outage. It is written BEFORE the action (`begin_action`: outcome
"started") and completed after it (`AuditTrail.finish`: "ok", "partial", "failed"); an entry
that cannot be written refuses the action (`DatabaseUnavailable` -> 503, or `ParamError` for an
actor the audit cannot hold: NUL, controls, bidi overrides, too long), so no action runs
unaudited. An action interrupted before its outcome is recorded stays "started".
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import DatabaseUnavailable, ParamError
from services.domain.events import MAX_ACTOR_LENGTH, Event
from services.domain.limits import is_display_text
from services.domain.opsmodel import (
    AUDIT_PREFIX,
    AdminActor,
    AuditEntry,
    AuditHandle,
    AuditLog,
    ItemOutcome,
    Page,
)
from services.persistence.event_store import audit_page
from services.persistence.models import EventLogEntry
from services.persistence.uow import UnitOfWork

logger = logging.getLogger(__name__)

MAX_PAGE_SIZE = 200
#: Ids kept in one entry (a batch of thousands is summarised by its counts in `detail`).
MAX_AUDIT_IDS = 1000
#: The outcome of an entry whose action has begun and not reported back (yet).
STARTED = "started"
#: Longest credential label (an admin token's fingerprint, "shell user@host").
MAX_CREDENTIAL_LENGTH = 200


class DatabaseAuditLog:
    """`services.domain.opsmodel.AuditLog` on the event log's table: each entry written, and
    completed, by a unit of work of its own (the event repository of every change's events)."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory

    def begin(self, entry: AuditEntry) -> AuditHandle:
        event = audit_event(entry)
        self._write(f"audit entry of {entry.action} not written", lambda uow: uow.events.add([event]))
        return AuditHandle(event_id=str(event.id), at=event.occurred_at)

    def finish(self, handle: AuditHandle, entry: AuditEntry) -> None:
        done = audit_event(entry, event_id=uuid.UUID(handle.event_id), at=handle.at)
        # Every key of the entry's data is replaced.
        updated = self._write(
            f"audit entry of {entry.action} not completed", lambda uow: uow.events.amend([done], done.data)
        )
        if not updated:
            raise DatabaseUnavailable(f"the audit entry of {entry.action} to complete was not found")

    def _write(self, what: str, write: Callable[[UnitOfWork], int | None]) -> int | None:
        """`write` in a transaction of its own, committed; DatabaseUnavailable when the database
        is unreachable or refuses it."""
        try:
            with UnitOfWork(self.session_factory) as uow:
                done = write(uow)
                uow.commit()
        except sa_exc.DBAPIError as exc:  # unreachable, or refused (a row it cannot store)
            raise DatabaseUnavailable(f"{what}: {exc.orig or exc}") from exc
        return done


def audit_event(entry: AuditEntry, *, event_id: uuid.UUID | None = None, at: datetime | None = None) -> Event:
    """The event-log form of an entry: type ``admin.<action>``, the actor's label as actor (a new
    id and the entry's time, unless the stored entry's are given)."""
    return Event(
        id=event_id or uuid.uuid4(),
        event_type=AUDIT_PREFIX + entry.action,
        occurred_at=at or entry.at,
        # No record id: a record's timeline already has its own event for the action
        # (report.regenerated, record.deleted); the ids are in `data`.
        record_id=None,
        actor=entry.actor[:MAX_ACTOR_LENGTH],
        data={
            "actor": entry.actor,
            "credential": entry.credential,
            "ids": list(entry.ids[:MAX_AUDIT_IDS]),
            "idCount": len(entry.ids),
            "outcome": entry.outcome,
            "detail": entry.detail,
        },
    )


def summarize(items: Sequence[ItemOutcome], done: str) -> str:
    """ "ok" when every id got `done` (or there was none), "failed" when none did, else "partial"."""
    hits = sum(1 for item in items if item.outcome == done)
    if hits == len(items):
        return "ok"
    return "failed" if hits == 0 else "partial"


def skipped_detail(items: Sequence[ItemOutcome]) -> str | None:
    """A short account of the skipped ids, for the entry's detail."""
    skipped = [item for item in items if item.outcome != "regenerated" and item.code is not None]
    if not skipped:
        return None
    parts = [f"{item.id}: {item.code} {item.reason or ''}".strip() for item in skipped[:20]]
    more = f" (+{len(skipped) - 20})" if len(skipped) > 20 else ""
    return "; ".join(parts) + more


class AuditTrail:
    """One action's entry: stored by `begin_action` before the action, completed by `finish`."""

    def __init__(self, audit: AuditLog | None, entry: AuditEntry | None, handle: AuditHandle | None) -> None:
        self.audit = audit
        self.entry = entry
        self.handle = handle

    def finish(
        self, outcome: str, *, detail: str | None = None, ids: Sequence[int | str] | None = None
    ) -> None:
        """Record the action's outcome. Never raises: the action is done whatever the database
        says now; if the outcome cannot be written the entry stays "started" (and is logged)."""
        if self.audit is None or self.entry is None or self.handle is None:
            return
        done = replace(
            self.entry, outcome=outcome, detail=detail, ids=list(self.entry.ids if ids is None else ids)
        )
        try:
            self.audit.finish(self.handle, done)
        except Exception:
            logger.error(
                "the outcome of audited action %s (%s) could not be recorded: its entry stays %r",
                done.action,
                outcome,
                STARTED,
                exc_info=True,
            )


def check_actor(actor: AdminActor) -> None:
    """ParamError for an actor the audit cannot hold as it is (NUL, controls, bidi, too long)."""
    if not is_display_text(actor.name, MAX_ACTOR_LENGTH):
        raise ParamError(f"操作者名称必须是 1 到 {MAX_ACTOR_LENGTH} 个可打印字符（不含控制字符）")
    if not is_display_text(actor.credential, MAX_CREDENTIAL_LENGTH):
        raise ParamError(f"凭证标识必须是 1 到 {MAX_CREDENTIAL_LENGTH} 个可打印字符")


def begin_action(
    audit: AuditLog | None,
    actor: AdminActor | None,
    action: str,
    ids: Sequence[int | str],
    *,
    detail: str | None = None,
) -> AuditTrail:
    """Store the entry of an action about to run (outcome "started"); its trail, to finish.

    Raises before anything is done: ParamError for an actor the audit cannot hold,
    DatabaseUnavailable when the entry cannot be written. No-op without an audit log
    (a unit test, the worker's own pages of a task).
    """
    if audit is None or actor is None:
        return AuditTrail(None, None, None)
    check_actor(actor)
    entry = AuditEntry(
        at=datetime.now(UTC),
        actor=actor.name,
        credential=actor.credential,
        action=action,
        ids=list(ids),
        outcome=STARTED,
        detail=detail,
    )
    return AuditTrail(audit, entry, audit.begin(entry))


def list_audit(
    uow: UnitOfWork,
    *,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    offset: int = 0,
    limit: int = 50,
) -> Page[AuditEntry]:
    """Audit entries, newest first; `since <= at < until`, naive times UTC (the web tier
    reads an admin's naive input in ADMIN_TIMEZONE first)."""
    if not offset >= 0 or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ParamError(f"分页参数错误：offset 不小于 0，limit 取 1 到 {MAX_PAGE_SIZE}")
    since = assume_utc(since)
    until = assume_utc(until)
    if since and until and since > until:
        raise ParamError("开始时间不能晚于结束时间")
    with uow:
        rows, total = audit_page(
            uow.session,
            event_type=AUDIT_PREFIX + action if action else None,
            actor=actor[:MAX_ACTOR_LENGTH] if actor else None,
            since=since,
            until=until,
            offset=offset,
            limit=limit,
        )
        items = [_entry(row) for row in rows]
    return Page(items=items, total=total, offset=offset, limit=limit)


def assume_utc(value: datetime | None) -> datetime | None:
    """`value` with UTC as its zone when it has none (an admin's filter time); None stays None."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _entry(row: EventLogEntry) -> AuditEntry:
    data: dict[str, Any] = dict(row.data or {})
    ids = data.get("ids")
    return AuditEntry(
        at=row.occurred_at,
        actor=str(data.get("actor") or row.actor or ""),
        credential=str(data.get("credential") or ""),
        action=row.event_type.removeprefix(AUDIT_PREFIX),
        ids=list(ids) if isinstance(ids, list) else [],
        outcome=str(data.get("outcome") or ""),
        detail=data.get("detail") if isinstance(data.get("detail"), str) else None,
    )
