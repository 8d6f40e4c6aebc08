"""Answer autosave: answers saved one by one during an assessment, Redis first.

While a record is in progress (status 2) the mini-program saves answers as the user
gives them. A save goes to an `AutosaveStore` (a Redis hash per record plus a dirty
set, hotpath/answers_flusher.py) and returns without touching the database; a
background flusher persists them in bulk with `persist_autosaved`. The store also
caches "record -> owner, status", so a save costs no database round trip once the
record is known (the first save after a cache miss does one indexed SELECT).

Every saved answer carries its save time (ms, the Redis server's clock, strictly
increasing per record). It becomes the answer's `answered_at`, and the bulk upsert only
replaces a stored answer by a *later* one, so a flush that arrives late never
overwrites newer data.

Submission (services/usecases/assessment.py) takes the autosave into account: the final answers
are the stored ones, overlaid by the autosaved ones, overlaid by the submission body.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Protocol

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session

from services.domain.errors import AutosaveUnavailable, InvalidOperation, ParamError, RecordNotFound
from services.domain.limits import is_id
from services.domain.scoring import MAX_VALUE, MIN_VALUE, format_ids, validate_partial_answers
from services.domain.status import RecordStatus
from services.domain.views import SaveAnswersResult
from services.persistence.isolation import write_isolating
from services.persistence.models import AssessmentRecord, Question
from services.persistence.uow import UnitOfWork

logger = logging.getLogger(__name__)

MSG_SAVE_NOT_ALLOWED = "当前状态不允许保存答案"

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: questions.id is an int4.
MAX_QUESTION_ID = 2**31 - 1


def from_epoch_ms(ms: int) -> datetime:
    """An exact UTC datetime for a Unix time in milliseconds (no float rounding)."""
    return EPOCH + timedelta(milliseconds=ms)


def to_epoch_ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class SavedAnswer:
    value: int
    #: When it was saved: Unix ms on the store's clock.
    saved_ms: int


class SaveOutcome(Enum):
    SAVED = "saved"
    #: The store does not know the record yet: look it up and `prime` the store.
    CACHE_MISS = "cache_miss"
    NOT_OWNER = "not_owner"
    WRONG_STATUS = "wrong_status"


@dataclass(frozen=True)
class SaveResponse:
    outcome: SaveOutcome
    saved_ms: int = 0
    answered_count: int = 0


class AutosaveStore(Protocol):
    """Where autosaved answers live until they are flushed (Redis in production).

    Every method raises `AutosaveUnavailable` when the store cannot be reached.
    """

    def save(self, user_id: int, record_id: int, answers: Sequence[tuple[int, int]]) -> SaveResponse:
        """Atomically: check the cached owner and status (2), store the answers, mark the record dirty."""

    def prime(self, record_id: int, user_id: int, status: int) -> None:
        """Cache the record's owner and status, unless the store already knows them."""

    def seal(self, record_id: int, user_id: int) -> None:
        """A submission begins: refuse every further save of the record (status 3)."""

    def load(self, record_id: int) -> dict[int, SavedAnswer]:
        """The autosaved answers of the record: {question id: answer}."""

    def current_question(self, record_id: int) -> int | None:
        """The question the record's progress state says was answered last, if the store has one."""

    def release(self, record_id: int, *, submitted: bool) -> None:
        """The submission ended: if `submitted`, drop the autosave and keep the record
        closed to saves; if not, forget the cached status (saves resume)."""


class ActiveQuestions:
    """Ids of the active questions, re-read at most every `ttl_s` seconds (one per app).

    Lets a save be validated without a database round trip. A question deactivated
    meanwhile is caught later: the flush and the submission ignore it.
    """

    def __init__(self, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._ids: frozenset[int] | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def get(self, uow: UnitOfWork) -> frozenset[int]:
        with self._lock:
            if self._ids is not None and self.clock() - self._read_at < self.ttl_s:
                return self._ids
        with uow:
            ids = frozenset(uow.session.scalars(select(Question.id).where(Question.is_active)).all())
        with self._lock:
            self._ids, self._read_at = ids, self.clock()
        return ids

    def clear(self) -> None:
        with self._lock:
            self._ids = None


def _record_status(uow: UnitOfWork, user_id: int, record_id: int) -> int:
    """The status of the caller's live record (one SELECT by primary key); else RecordNotFound."""
    with uow:
        row = uow.session.execute(
            select(AssessmentRecord.user_id, AssessmentRecord.status, AssessmentRecord.is_deleted).where(
                AssessmentRecord.id == record_id
            )
        ).one_or_none()
    if row is None or row.is_deleted or row.user_id != user_id:
        raise RecordNotFound()
    return int(row.status)


def save_answers(
    uow: UnitOfWork,
    store: AutosaveStore,
    questions: ActiveQuestions,
    *,
    user_id: int,
    record_id: int,
    answers: Sequence[tuple[int, int]],
) -> SaveAnswersResult:
    """Autosave some answers of the caller's record in status 2.

    Validated like a submission except that questions may be left out: 1001 for a
    malformed, unknown or repeated question or a value outside 1..5, 3241 for a record
    that is not the caller's live record, 2005 when it is not in status 2, 5003 when the
    store is down. Nothing reaches the database here.
    """
    if not is_id(user_id):
        raise ParamError("用户ID必须是正整数")
    if not is_id(record_id):
        raise RecordNotFound()
    if not answers:
        raise ParamError("答案不能为空")
    values = validate_partial_answers(questions.get(uow), answers)
    pairs = list(values.items())
    for _ in range(2):
        response = store.save(user_id, record_id, pairs)
        if response.outcome is SaveOutcome.SAVED:
            return SaveAnswersResult(
                record_id=record_id,
                saved=len(pairs),
                answered_count=response.answered_count,
                saved_at=from_epoch_ms(response.saved_ms),
            )
        if response.outcome is SaveOutcome.NOT_OWNER:
            raise RecordNotFound()
        if response.outcome is SaveOutcome.WRONG_STATUS:
            raise InvalidOperation(MSG_SAVE_NOT_ALLOWED)
        status = _record_status(uow, user_id, record_id)
        if status != RecordStatus.IN_PROGRESS:
            raise InvalidOperation(MSG_SAVE_NOT_ALLOWED)
        store.prime(record_id, user_id, status)
    # Primed, and still a miss: the cache entry vanished in between (eviction). Rare.
    raise AutosaveUnavailable()


# -- submission -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MergedAnswers:
    """The answers a submission stores: {question id: value}, each with where it came from."""

    values: dict[int, int]
    #: answered_at of the answers that did not come from the body (stored or autosaved).
    answered_at: dict[int, datetime]
    from_autosave: int
    #: Latest save time among the autosaved answers used (ms), None if there were none.
    latest_saved_ms: int | None


def merge_submission(
    active_ids: Collection[int],
    stored: Mapping[int, tuple[int, datetime]],
    autosaved: Mapping[int, SavedAnswer] | None,
    body: Sequence[tuple[int, int]],
) -> MergedAnswers:
    """stored ← overlaid by autosaved ← overlaid by the body, then checked for completeness.

    The body is validated strictly (malformed, unknown or repeated questions: ParamError);
    stored and autosaved answers to questions no longer active are left out, since the user
    could not correct them. `autosaved` None means the store could not be read: then the
    body alone must answer every question (AutosaveUnavailable otherwise), because the
    store may hold later answers than the database.
    """
    active = set(active_ids)
    given = validate_partial_answers(active, body)
    if autosaved is None and not active <= given.keys():
        raise AutosaveUnavailable()
    values: dict[int, int] = {}
    answered_at: dict[int, datetime] = {}
    for qid, (value, at) in stored.items():
        if qid in active:
            values[qid], answered_at[qid] = value, at
    used_autosave = 0
    latest: int | None = None
    for qid, saved in (autosaved or {}).items():
        if qid in active and qid not in given:
            values[qid], answered_at[qid] = saved.value, from_epoch_ms(saved.saved_ms)
            used_autosave += 1
            latest = saved.saved_ms if latest is None else max(latest, saved.saved_ms)
    for qid, value in given.items():
        values[qid] = value
        answered_at.pop(qid, None)
    if not values and active:
        raise ParamError("答案不能为空")
    missing = active - values.keys()
    if missing:
        raise ParamError(f"还有题目未作答：{format_ids(missing)}")
    return MergedAnswers(values, answered_at, used_autosave, latest)


# -- the flusher's bulk write -------------------------------------------------------------------


@dataclass(frozen=True)
class PersistResult:
    #: Records found in status 2 and not deleted (their answers were written); the others
    #: can never take these answers.
    live: frozenset[int]
    #: Rows inserted or updated.
    written: int
    #: (record id, question id) of the answers the database refused (data errors).
    refused: tuple[tuple[int, int], ...] = ()


_LOCK_LIVE = (
    select(AssessmentRecord.id)
    .where(
        AssessmentRecord.id.in_(bindparam("ids", expanding=True)),
        AssessmentRecord.status == RecordStatus.IN_PROGRESS,
        AssessmentRecord.is_deleted.is_(False),
    )
    .order_by(AssessmentRecord.id)
    .with_for_update(read=True)
)

_UPSERT = text(
    """
    INSERT INTO answers (record_id, question_id, value, answered_at)
    SELECT v.record_id, v.question_id, v.value, v.answered_at
    FROM unnest(CAST(:records AS bigint[]), CAST(:questions AS integer[]),
                CAST(:vals AS smallint[]), CAST(:times AS timestamptz[]))
         AS v(record_id, question_id, value, answered_at)
    JOIN questions q ON q.id = v.question_id AND q.is_active
    ON CONFLICT (record_id, question_id) DO UPDATE
        SET value = EXCLUDED.value, answered_at = EXCLUDED.answered_at
        WHERE answers.answered_at < EXCLUDED.answered_at
    """
)


def persist_autosaved(session: Session, answers: Mapping[int, Mapping[int, SavedAnswer]]) -> PersistResult:
    """Upsert autosaved answers of many records in two statements; the caller commits.

    Only records still in status 2 (and not deleted) are written: they are share-locked
    first, in id order, so a submission (which locks its record FOR UPDATE) either
    finishes before and the record is skipped, or waits for this transaction and then
    reads what it wrote. A submitted record is never overwritten by stale autosave
    data. Answers to unknown or inactive questions are skipped; a stored answer is only
    replaced by a later one (answered_at). Answers the database refuses for a data
    reason are left out and listed in `PersistResult.refused` (services/persistence/isolation.py);
    any other error propagates.
    """
    if not answers:
        return PersistResult(frozenset(), 0)
    live = frozenset(session.scalars(_LOCK_LIVE, {"ids": sorted(answers)}).all())
    rows = [
        (record_id, qid, saved.value, from_epoch_ms(saved.saved_ms))
        for record_id, by_question in answers.items()
        if record_id in live
        for qid, saved in by_question.items()
    ]
    if not rows:
        return PersistResult(live, 0)
    written, refused = write_isolating(session, rows, _upsert)
    return PersistResult(live, written, tuple((r[0], r[1]) for r in refused))


def _upsert(session: Session, rows: Sequence[tuple[int, int, int, datetime]]) -> int:
    result = session.execute(
        _UPSERT,
        {
            "records": [r[0] for r in rows],
            "questions": [r[1] for r in rows],
            "vals": [r[2] for r in rows],
            "times": [r[3] for r in rows],
        },
    )
    return int(getattr(result, "rowcount", 0) or 0)


#: Latest save time a hash may carry: 9999-12-31T23:59:59.999Z, the last a datetime holds.
MAX_SAVED_MS = 253_402_300_799_999
_DIGITS = re.compile(rb"0|[1-9][0-9]{0,18}")


def plain_int(raw: bytes | str, low: int, high: int) -> int | None:
    """A plain ASCII decimal in low..high, else None (no sign, space, leading zero, "1_0", other digits)."""
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)
    if not _DIGITS.fullmatch(data):
        return None
    value = int(data)
    return value if low <= value <= high else None


def decode_saved(raw: Mapping[Any, Any]) -> tuple[dict[int, SavedAnswer], list[tuple[bytes, bytes]]]:
    """Decode a stored autosave hash ({"<question id>": "<value>:<saved ms>"}) strictly.

    Returns the answers and the fields that are not answers (field, value), verbatim:
    not ASCII, not decimal, a value outside 1..5, a question id or a time out of range.
    """
    answers: dict[int, SavedAnswer] = {}
    bad: list[tuple[bytes, bytes]] = []
    for key, item in raw.items():
        field = raw_bytes(key)
        entry = raw_bytes(item)
        value, _, saved_ms = entry.partition(b":")
        qid = plain_int(field, 1, MAX_QUESTION_ID)
        parsed = plain_int(value, MIN_VALUE, MAX_VALUE)
        ms = plain_int(saved_ms, 1, MAX_SAVED_MS)
        if qid is None or parsed is None or ms is None:
            bad.append((field, entry))
        else:
            answers[qid] = SavedAnswer(parsed, ms)
    return answers, bad


def parse_saved(raw: Mapping[Any, Any], *, record_id: int) -> dict[int, SavedAnswer]:
    """Decode a stored autosave hash; bad fields are skipped (logged)."""
    answers, bad = decode_saved(raw)
    for field, entry in bad:
        logger.warning(
            "record %s: skipping malformed autosave field %r=%r", record_id, field[:100], entry[:100]
        )
    return answers


def raw_bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
