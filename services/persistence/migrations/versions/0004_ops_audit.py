"""The audit trail's index: admin actions in the event log by time.

Revision ID: 0004_ops_audit
Revises: 0003
Create Date: 2026-12-01

Admin actions are rows `admin.<action>` of the partitioned `event_log`, a tiny share of
it; a partial index (created on every partition) keeps the audit listing an index scan
however many other events there are.
"""

from alembic import op

revision = "0004_ops_audit"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_event_log_admin_occurred_at",
        "event_log",
        ["occurred_at"],
        postgresql_where="event_type LIKE 'admin.%'",
    )


def downgrade() -> None:
    op.drop_index("ix_event_log_admin_occurred_at", table_name="event_log")
