"""Hot path: progress columns on assessment_records, the partitioned event_log.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

event_log is partitioned by RANGE (occurred_at), one partition per UTC month; this
migration creates the parent, the DEFAULT partition and the partitions of the month it
runs in and the next. Later months are created by the event-log consumer before it
inserts into them (services/persistence/partitions.py, which uses the same names).
"""

from datetime import UTC, date, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _month(offset: int) -> date:
    today = datetime.now(UTC)
    index = today.year * 12 + today.month - 1 + offset
    return date(index // 12, index % 12 + 1, 1)


def upgrade() -> None:
    op.add_column("assessment_records", sa.Column("current_question_id", sa.Integer()))
    op.add_column("assessment_records", sa.Column("answered_count", sa.Integer()))
    op.add_column("assessment_records", sa.Column("last_activity_at", sa.DateTime(timezone=True)))
    op.add_column("assessment_records", sa.Column("progress_updated_at", sa.DateTime(timezone=True)))

    op.create_table(
        "event_log",
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("record_id", sa.BigInteger()),
        sa.Column("user_id", sa.BigInteger()),
        sa.Column("actor", sa.String(64)),
        sa.Column("data", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("occurred_at", "id", name="event_log_pkey"),
        postgresql_partition_by="RANGE (occurred_at)",
    )
    op.create_index("ix_event_log_record_id_occurred_at", "event_log", ["record_id", "occurred_at"])
    op.execute("CREATE TABLE event_log_default PARTITION OF event_log DEFAULT")
    for offset in (0, 1):
        low, high = _month(offset), _month(offset + 1)
        op.execute(
            f"CREATE TABLE event_log_y{low.year:04d}m{low.month:02d} PARTITION OF event_log"
            f" FOR VALUES FROM ('{low.isoformat()} 00:00:00+00') TO ('{high.isoformat()} 00:00:00+00')"
        )


def downgrade() -> None:
    op.drop_table("event_log")  # its partitions go with it
    op.drop_column("assessment_records", "progress_updated_at")
    op.drop_column("assessment_records", "last_activity_at")
    op.drop_column("assessment_records", "answered_count")
    op.drop_column("assessment_records", "current_question_id")
