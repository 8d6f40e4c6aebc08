"""The operations tooling's value objects and ports: who acted, per-id outcomes, dead letters,
quarantined payloads, audit entries, and what the services need from Redis and the audit log.

Frozen dataclasses (web/response_models.py writes them camelCased); the Protocols are
implemented in redis_adapters/ (Redis) and services/usecases/audit.py (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

#: Outcomes of one id in a batch operation.
REGENERATED = "regenerated"
REQUEUED = "requeued"
RETRIED = "retried"  # a delayed retry released to the queue now
DELETED = "deleted"
SKIPPED = "skipped"

#: Prefix of the event types of admin actions in the event log (`admin.requeue`, ...).
AUDIT_PREFIX = "admin."


@dataclass(frozen=True)
class AdminActor:
    """Who acted: a label ("admin:ab12cd34", "console:<name>", "cli") and which credential,
    named by a label or fingerprint, never the secret itself."""

    name: str
    credential: str


@dataclass(frozen=True)
class ItemOutcome:
    """One id's outcome of a batch operation."""

    id: int | str
    outcome: str  # REGENERATED | REQUEUED | DELETED | SKIPPED
    #: The API's error code when skipped: 3241 not found, 2005 wrong status, 5003 queue down, 1001 unreadable.
    code: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class DeadLetter:
    #: Stable handle for requeue/delete: a digest of the entry's bytes (".2" etc. for repeats).
    message_id: str
    record_id: int | None
    attempts: int
    last_error: str | None
    dead_at: datetime | None
    raw: str


@dataclass(frozen=True)
class DelayedRetry:
    """A report job waiting for its retry (the broker's delayed set), as operators see it."""

    #: Handle for retry-now and delete: the entry's unique 16-hex prefix (None: an entry the
    #: broker did not write, shown verbatim, no action possible).
    message_id: str | None
    #: None when the job cannot be read (shown verbatim).
    record_id: int | None
    #: Attempts made so far, all failed (the job's RetryCount); the next is attempt `attempts + 1`.
    attempts: int | None
    #: None when the score is no time (shown as unreadable).
    due_at: datetime | None
    #: The job's EnqueueTime (a retry keeps its first), None when unreadable.
    enqueued_at: datetime | None
    #: The job as it will be queued again (the wire format), verbatim.
    raw: str
    #: The last failed attempt's error, from the record's event log (None: not recorded yet).
    last_error: str | None = None


@dataclass(frozen=True)
class InvalidPayload:
    #: Handle for delete, as `DeadLetter.message_id`.
    key: str
    #: The entry verbatim; bytes that are not UTF-8 shown as \\xNN escapes.
    raw: str
    #: Why the worker could not read it, as it said when it quarantined it (None: quarantined
    #: before this was recorded, or by hand).
    reason: str | None = None
    #: When it was quarantined (the Redis server's clock); None as `reason`.
    quarantined_at: datetime | None = None


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    actor: str
    credential: str
    #: What was done: "regenerate", "batch_regenerate", "delete_record", "requeue", ...
    action: str
    ids: list[int | str]
    #: "ok", "partial", "failed", or what the action reports.
    outcome: str
    detail: str | None


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


class QueueOperations(Protocol):
    """The report queue's dead letters and quarantine, as operators handle them.

    Raises `services.domain.errors.QueueUnavailable` when Redis cannot be reached.
    """

    def dead_letters(self, offset: int, limit: int) -> tuple[int, list[DeadLetter]]:
        """(entries in all, one page of them), newest first."""

    def all_dead_letters(self) -> list[DeadLetter]: ...

    def requeue_dead(self, message_ids: Sequence[str]) -> dict[str, bool]:
        """For each dead letter: remove it and queue a fresh job (RetryCount 0) for its record,
        in one atomic step. False for an id no longer in the list."""

    def delete_dead(self, message_ids: Sequence[str]) -> dict[str, bool]: ...

    def enqueue_reviving(self, record_ids: Sequence[int]) -> int:
        """Queue a job per record and drop their dead letters in one atomic step; the letters dropped."""

    def delayed_retries(self, offset: int, limit: int) -> tuple[int, list[DelayedRetry]]:
        """(retries waiting in all, one page of them), soonest due first."""

    def delayed_retries_of(self, record_id: int) -> list[DelayedRetry]:
        """The retries of one record waiting, soonest due first."""

    def retry_delayed_now(self, message_ids: Sequence[str]) -> dict[str, bool]:
        """Queue these delayed retries now (RetryCount unchanged), each in one atomic step.
        False for an id no longer delayed (released meanwhile, or removed)."""

    def delete_delayed(self, message_ids: Sequence[str]) -> dict[str, int | None]:
        """End these delayed retries: for each, the record id whose last job it was (its job
        key now carries the dead mark: the caller sets the record's status, then clears the
        mark), 0 when another job of the record lives on, None when no longer delayed."""

    def clear_dead_marks(self, record_ids: Sequence[int]) -> None:
        """Drop the dead marks of these records (their status is set)."""

    def invalid_payloads(self, offset: int, limit: int) -> tuple[int, list[InvalidPayload]]: ...

    def delete_invalid(self, keys: Sequence[str]) -> dict[str, bool]: ...

    def purge_invalid(self) -> int:
        """Drop the whole quarantine; how many entries it held."""


@dataclass(frozen=True)
class AuditHandle:
    """Which stored entry an action's outcome completes (its event's id and time)."""

    event_id: str
    at: datetime


class AuditLog(Protocol):
    """Where admin actions are recorded, durably (PostgreSQL, never only Redis).

    An entry is stored BEFORE its action (outcome "started") and completed after it, so no
    action runs unaudited: if the entry cannot be stored, the action is refused.
    """

    def begin(self, entry: AuditEntry) -> AuditHandle:
        """Store the entry; raises `DatabaseUnavailable` when it could not (nothing is done then)."""

    def finish(self, handle: AuditHandle, entry: AuditEntry) -> None:
        """Complete the stored entry with `entry`'s outcome, ids and detail; raises
        `DatabaseUnavailable` when it could not (the entry then stays "started")."""
