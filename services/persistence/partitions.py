"""Monthly partitions of the `event_log` table (PostgreSQL declarative partitioning).

`event_log` is partitioned by RANGE on `occurred_at`, one partition per calendar month
(UTC) named ``event_log_yYYYYmMM``, plus ``event_log_default`` for anything else. The
migration creates the parent, the default and the partitions of the month it runs in
and the next; the event-log consumer calls `PartitionManager.ensure_for` before each
insert, so rows land in their month's partition, not in the default.

Creating a partition moves the rows of its month that already sit in the default
partition into it (PostgreSQL refuses to attach a range the default still holds), so
a month that was missed for a while is still partitioned cleanly later.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

logger = logging.getLogger(__name__)

PARENT_TABLE = "event_log"
DEFAULT_PARTITION = "event_log_default"
_NAME = re.compile(r"event_log_y(\d{4})m(\d{2})")

#: Months further back or ahead of now get no partition of their own (their rows go to
#: the default): a wrong clock must not create hundreds of tables.
MONTHS_BACK = 24
MONTHS_AHEAD = 2

#: After a failed creation, wait this long before trying that month again.
RETRY_AFTER_S = 60.0

#: Serialises partition creation between processes (a consumer taking over, a migration)
#: and with the dropping of expired partitions (services/persistence/retention.py).
PARTITION_LOCK_KEY = 0x6576_6C6F  # "evlo"


def month_of(moment: datetime) -> date:
    """First day of the UTC month of `moment` (a naive time is taken as UTC)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


def partition_name(month: date) -> str:
    return f"event_log_y{month.year:04d}m{month.month:02d}"


def is_partition_table(name: str) -> bool:
    """A partition of event_log (they are not in the models: Alembic must ignore them)."""
    return name == DEFAULT_PARTITION or _NAME.fullmatch(name) is not None


def existing_months(session: Session) -> set[date]:
    """Months that have a partition attached to event_log."""
    names = session.scalars(
        text(
            "SELECT c.relname FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE p.oid = to_regclass(:parent)"
        ),
        {"parent": PARENT_TABLE},
    ).all()
    months = set()
    for name in names:
        match = _NAME.fullmatch(name)
        if match:
            months.add(date(int(match[1]), int(match[2]), 1))
    return months


def create_month_partition(session: Session, month: date) -> bool:
    """Create and attach the partition of `month`, moving its rows out of the default.

    Runs in the caller's transaction; True if it was created, False if it existed.
    """
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PARTITION_LOCK_KEY})
    if month in existing_months(session):
        return False
    # DDL takes no bind parameters: the name and bounds are built from a date's digits only.
    name = partition_name(month)
    low = f"{month.isoformat()} 00:00:00+00"
    high = f"{add_months(month, 1).isoformat()} 00:00:00+00"
    like = f"LIKE {PARENT_TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
    session.execute(text(f"CREATE TABLE IF NOT EXISTS {name} ({like})"))
    # Rows of this month that reached the default partition before it existed move over.
    session.execute(
        text(
            f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE occurred_at >= :low"  # noqa: S608
            f" AND occurred_at < :high RETURNING *) INSERT INTO {name} SELECT * FROM moved"
        ),
        {"low": datetime.fromisoformat(low), "high": datetime.fromisoformat(high)},
    )
    session.execute(
        text(f"ALTER TABLE {PARENT_TABLE} ATTACH PARTITION {name} FOR VALUES FROM ('{low}') TO ('{high}')")
    )
    return True


class PartitionManager:
    """Makes sure the partitions of the months about to be written exist; caches what it knows.

    Not thread-safe: one per consumer.
    """

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.session_factory = session_factory
        self.clock = clock
        self._known: set[date] | None = None
        self._failed: dict[date, float] = {}

    def forget(self) -> None:
        """Drop the cache (after a failover the partitions may have changed)."""
        self._known = None

    def ensure_for(self, times: Iterable[datetime]) -> set[date]:
        """Create the missing partitions of the months of `times`; the months now partitioned.

        Never raises for a failed creation: it is logged, the rows of that month go to the
        default partition, and the month is tried again after `RETRY_AFTER_S`.
        """
        wanted = {month_of(t) for t in times}
        if self._known is None:
            with self.session_factory() as session:
                self._known = existing_months(session)
        known = self._known
        current = month_of(self.clock())
        low, high = add_months(current, -MONTHS_BACK), add_months(current, MONTHS_AHEAD)
        for month in sorted(wanted - known):
            if not low <= month <= high:
                continue
            failed_at = self._failed.get(month)
            if failed_at is not None and time.monotonic() - failed_at < RETRY_AFTER_S:
                continue
            try:
                with self.session_factory() as session, session.begin():
                    created = create_month_partition(session, month)
            except Exception:
                self._failed[month] = time.monotonic()
                logger.error(
                    "could not create partition %s; its rows go to %s",
                    partition_name(month),
                    DEFAULT_PARTITION,
                    exc_info=True,
                )
                continue
            self._failed.pop(month, None)
            known.add(month)
            if created:
                logger.info("created partition %s", partition_name(month))
        return wanted & known
