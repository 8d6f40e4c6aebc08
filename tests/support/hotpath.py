"""Helpers of the hot-path tests: records in status 2, reading answers and progress back."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, text

from services.domain.questionnaire import load_questionnaire
from tests.support import records
from tests.support.records import RecordSpec

QUESTION_IDS = [q.id for q in load_questionnaire().questions]


def insert_records(engine: Engine, count: int, *, status: int = 2, user_id: int = 1) -> list[int]:
    """`count` records of one user in one status (2: started, no answers saved yet)."""
    return records.insert_records(engine, [RecordSpec(status, user_id)] * count)


def stored_answers(engine: Engine, record_ids: list[int]) -> dict[int, dict[int, int]]:
    result: dict[int, dict[int, int]] = {r: {} for r in record_ids}
    with engine.connect() as conn:
        for record_id, qid, value in conn.execute(
            text("SELECT record_id, question_id, value FROM answers WHERE record_id = ANY(:ids)"),
            {"ids": record_ids},
        ):
            result[record_id][qid] = value
    return result


def progress_row(
    engine: Engine, record_id: int
) -> tuple[int | None, int | None, datetime | None, datetime | None]:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT current_question_id, answered_count, last_activity_at, progress_updated_at"
                " FROM assessment_records WHERE id = :id"
            ),
            {"id": record_id},
        ).one()
    return row[0], row[1], row[2], row[3]
