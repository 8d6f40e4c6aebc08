"""Resuming an assessment: a record with its answers so far and where the user left off.

The answers are the ones a submission would take (services/usecases/assessment.py): the stored
ones overlaid by those still in the autosave store (Redis), which the hot-path flusher
has not written yet. So a mini-program reopened after being closed shows every answer
it had saved, and the question to go on with.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from datetime import datetime

from services.domain.errors import AutosaveUnavailable, RecordNotFound
from services.domain.limits import is_id
from services.domain.saved_answers import SavedAnswer, from_epoch_ms
from services.domain.status import RecordStatus
from services.domain.views import AnswerView, RecordDetailView
from services.persistence.uow import UnitOfWork
from services.usecases.assessment import record_view
from services.usecases.autosave import AutosaveStore

logger = logging.getLogger(__name__)


def get_record_detail(
    uow: UnitOfWork, store: AutosaveStore | None, user_id: int, record_id: int
) -> RecordDetailView:
    """The caller's live record with its merged answers and progress; else RecordNotFound.

    Only a record in status 2 can have autosaved answers. If the store cannot be read,
    the database's answers are returned with ``autosave_available=False`` rather than
    an error: the user can still go on, and the next save reaches the store again.
    """
    if not is_id(user_id) or not is_id(record_id):
        raise RecordNotFound()
    with uow:
        record = uow.records.own(user_id, record_id)
        if record is None:
            raise RecordNotFound()
        base = record_view(record)
        current = record.current_question_id
        in_progress = record.status == RecordStatus.IN_PROGRESS
        order = uow.questions.active_ids_in_order()
        stored: dict[int, tuple[int, datetime]] = uow.records.stored_answers(record.id)

    autosaved: dict[int, SavedAnswer] = {}
    available = True
    if in_progress and store is not None:
        try:
            autosaved = store.load(record_id)
            current = store.current_question(record_id) or current
        except AutosaveUnavailable:
            logger.warning("autosave of record %s unreadable: resuming from the database", record_id)
            available = False

    answers: list[AnswerView] = []
    for qid in order:
        saved = autosaved.get(qid)
        if saved is not None:
            answers.append(
                AnswerView(question_id=qid, value=saved.value, answered_at=from_epoch_ms(saved.saved_ms))
            )
        elif qid in stored:
            value, at = stored[qid]
            answers.append(AnswerView(question_id=qid, value=value, answered_at=at))
    answered = {a.question_id for a in answers}
    return RecordDetailView(
        **{f.name: getattr(base, f.name) for f in fields(base)},
        answers=answers,
        answered_count=len(answers),
        total_questions=len(order),
        current_question_id=current,
        next_question_id=next((qid for qid in order if qid not in answered), None),
        autosave_available=available,
    )
