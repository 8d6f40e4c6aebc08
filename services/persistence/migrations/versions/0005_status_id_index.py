"""Live records by status, then id: keyset pages of one status (regenerateMatching).

Revision ID: 0005_status_id_index
Revises: 0004_ops_audit
Create Date: 2026-12-01

A regeneration task walks the records of one status in id order, a page of 1,000 at a
time (services/usecases/regeneration_tasks.py). With an index on `status` alone each page read
every record of that status again and sorted them; on (status, id) a page is an index
range scan. It replaces the index on `status` alone, whose queries it serves as well.
"""

from alembic import op

revision = "0005_status_id_index"
down_revision = "0004_ops_audit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_assessment_records_status_id_live",
        "assessment_records",
        ["status", "id"],
        postgresql_where="NOT is_deleted",
    )
    op.drop_index("ix_assessment_records_status_live", table_name="assessment_records")


def downgrade() -> None:
    op.create_index(
        "ix_assessment_records_status_live",
        "assessment_records",
        ["status"],
        postgresql_where="NOT is_deleted",
    )
    op.drop_index("ix_assessment_records_status_id_live", table_name="assessment_records")
