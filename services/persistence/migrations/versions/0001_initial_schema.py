"""Questionnaire, assessment records, answers, results and report summaries.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dimensions",
        sa.Column("id", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("code", sa.String(32), nullable=False, unique=True),
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("sort_order", sa.SmallInteger(), nullable=False),
    )
    op.create_table(
        "questions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("dimension_id", sa.SmallInteger(), sa.ForeignKey("dimensions.id"), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("reverse_scored", sa.Boolean(), nullable=False),
        sa.Column("sort_order", sa.Integer(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False, server_default=sa.text("true")),
    )
    op.create_index("ix_questions_dimension_id", "questions", ["dimension_id"])
    op.create_table(
        "assessment_records",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False, server_default=sa.text("1")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("submitted_at", sa.DateTime(timezone=True)),
        sa.Column("completed_at", sa.DateTime(timezone=True)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("is_deleted", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.CheckConstraint("status BETWEEN 1 AND 5", name="ck_assessment_records_status"),
    )
    op.create_index("ix_assessment_records_user_id", "assessment_records", ["user_id"])
    op.create_index(
        "ix_assessment_records_status_live",
        "assessment_records",
        ["status"],
        postgresql_where=sa.text("NOT is_deleted"),
    )
    op.create_table(
        "answers",
        sa.Column(
            "record_id",
            sa.BigInteger(),
            sa.ForeignKey("assessment_records.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("question_id", sa.Integer(), sa.ForeignKey("questions.id"), primary_key=True),
        sa.Column("value", sa.SmallInteger(), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("value BETWEEN 1 AND 5", name="ck_answers_value"),
    )
    op.create_table(
        "dimension_results",
        sa.Column(
            "record_id",
            sa.BigInteger(),
            sa.ForeignKey("assessment_records.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("dimension_id", sa.SmallInteger(), sa.ForeignKey("dimensions.id"), primary_key=True),
        sa.Column("raw_score", sa.Integer(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("rank", sa.SmallInteger(), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
    )
    op.create_table(
        "report_summaries",
        sa.Column(
            "record_id",
            sa.BigInteger(),
            sa.ForeignKey("assessment_records.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("top_dimensions", postgresql.JSONB(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("generated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("report_summaries")
    op.drop_table("dimension_results")
    op.drop_table("answers")
    op.drop_index("ix_assessment_records_status_live", table_name="assessment_records")
    op.drop_index("ix_assessment_records_user_id", table_name="assessment_records")
    op.drop_table("assessment_records")
    op.drop_index("ix_questions_dimension_id", table_name="questions")
    op.drop_table("questions")
    op.drop_table("dimensions")
