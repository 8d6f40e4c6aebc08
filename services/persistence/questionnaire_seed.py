"""The questionnaire seeded into the database: dimensions and questions upserted from the data.

python -m services.persistence.questionnaire_seed      # the Procfile's release step
"""

from __future__ import annotations

import sys

from sqlalchemy import update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from config.settings import Settings
from services.domain.questionnaire import Questionnaire, load_questionnaire
from services.persistence.db import build_session_factory
from services.persistence.models import Dimension, Question
from services.persistence.patience import DEFAULT_WAIT_S, DatabaseNotReached, patiently
from services.persistence.uow import UnitOfWork


def seed_questionnaire(uow: UnitOfWork, questionnaire: Questionnaire | None = None) -> int:
    """Upsert the dimensions and questions, then commit; returns the number of questions.

    Idempotent (INSERT ... ON CONFLICT (id) DO UPDATE), so every process may run it at
    start-up, concurrently. Questions that exist in the database but no longer in the
    data are deactivated rather than deleted: answers of past records still point at them.
    """
    q = questionnaire or load_questionnaire()
    dim_rows = [
        {"id": d.id, "code": d.code, "name": d.name, "description": d.description, "sort_order": d.sort_order}
        for d in q.dimensions
    ]
    question_rows = [
        {
            "id": question.id,
            "dimension_id": d.id,
            "text": question.text,
            "reverse_scored": question.reverse_scored,
            "sort_order": question.sort_order,
            "is_active": question.is_active,
        }
        for d in q.dimensions
        for question in d.questions
    ]
    with uow:
        session = uow.session
        dim_stmt = pg_insert(Dimension).values(dim_rows)
        session.execute(
            dim_stmt.on_conflict_do_update(
                index_elements=[Dimension.id],
                set_={k: dim_stmt.excluded[k] for k in ("code", "name", "description", "sort_order")},
            )
        )
        q_stmt = pg_insert(Question).values(question_rows)
        session.execute(
            q_stmt.on_conflict_do_update(
                index_elements=[Question.id],
                set_={
                    k: q_stmt.excluded[k]
                    for k in ("dimension_id", "text", "reverse_scored", "sort_order", "is_active")
                },
            )
        )
        session.execute(
            update(Question)
            .where(Question.id.not_in([r["id"] for r in question_rows]), Question.is_active)
            .values(is_active=False)
        )
        uow.commit()
    return len(question_rows)


def main() -> int:
    """`python -m services.persistence.questionnaire_seed` (the Procfile's release step, after the
    migrations): load the packaged questionnaire into DATABASE_URL, waiting for a database that
    cannot be reached yet (services/persistence/patience.py; exit code 3 when the wait is over)."""
    factory = build_session_factory(Settings.from_env())
    try:
        count = patiently("questionnaire", lambda: seed_questionnaire(UnitOfWork(factory)))
    except DatabaseNotReached as exc:
        print(
            f"questionnaire: the database could not be reached in {DEFAULT_WAIT_S:g} s: {exc}",
            file=sys.stderr,
        )
        return 3
    print(f"questionnaire loaded: {count} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
