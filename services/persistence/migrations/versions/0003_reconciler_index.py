"""The reconciler's index: ids of live records in status 3.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

The reconciler pages through the records in status 3 by id; a partial index holds
just those, so each page is an index range scan however many records exist.
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_assessment_records_generating",
        "assessment_records",
        ["id"],
        postgresql_where="status = 3 AND NOT is_deleted",
    )


def downgrade() -> None:
    op.drop_index("ix_assessment_records_generating", table_name="assessment_records")
