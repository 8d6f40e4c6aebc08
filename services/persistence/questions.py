"""The questionnaire's reads as the use cases need them (its seed is questionnaire_seed.py)."""

from __future__ import annotations

from sqlalchemy import select

from services.persistence.driver import Repository, statements
from services.persistence.models import Dimension, Question

#: Read in every submission's transaction: plain SQL on psycopg (services/persistence/driver.py).
ACTIVE_IDS = "SELECT id FROM questions WHERE is_active"


class QuestionRepository(Repository):
    def active_ids(self) -> list[int]:
        with statements(self._work, pipeline=False) as conn:
            cursor = conn.execute(ACTIVE_IDS)
        return [qid for (qid,) in cursor.fetchall()]

    def active_in_order(self) -> list[tuple[int, str, str, str, int]]:
        """(id, dimension code, dimension name, text, sort order) of the active questions, in
        dimension order, then question order."""
        rows = self.session.execute(
            select(Question.id, Dimension.code, Dimension.name, Question.text, Question.sort_order)
            .join(Dimension, Question.dimension_id == Dimension.id)
            .where(Question.is_active)
            .order_by(Dimension.sort_order, Dimension.id, Question.sort_order, Question.id)
        ).all()
        return [(qid, code, name, text, order) for qid, code, name, text, order in rows]

    def active_ids_in_order(self) -> list[int]:
        """The active questions' ids in questionnaire order (dimension, then question)."""
        return list(
            self.session.scalars(
                select(Question.id)
                .join(Dimension, Question.dimension_id == Dimension.id)
                .where(Question.is_active)
                .order_by(Dimension.sort_order, Dimension.id, Question.sort_order, Question.id)
            ).all()
        )
