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
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from services.domain.errors import AutosaveUnavailable, InvalidOperation, ParamError, RecordNotFound
from services.domain.limits import is_id
from services.domain.saved_answers import SavedAnswer, SaveOutcome, SaveResponse, from_epoch_ms
from services.domain.scoring import validate_partial_answers
from services.domain.status import RecordStatus
from services.domain.views import SaveAnswersResult
from services.persistence.uow import UnitOfWork
from services.usecases.ports import ReportQueue

logger = logging.getLogger(__name__)

MSG_SAVE_NOT_ALLOWED = "当前状态不允许保存答案"


class AutosaveStore(Protocol):
    """Where autosaved answers live until they are flushed (Redis in production).

    Every method raises `AutosaveUnavailable` when the store cannot be reached (but
    `release_and_enqueue`, which returns its errors).
    """

    def save(self, user_id: int, record_id: int, answers: Sequence[tuple[int, int]]) -> SaveResponse:
        """Atomically: check the cached owner and status (2), store the answers, mark the record dirty."""

    def prime(self, record_id: int, user_id: int, status: int) -> None:
        """Cache the record's owner and status, unless the store already knows them."""

    def seal(self, record_id: int, user_id: int) -> dict[int, SavedAnswer]:
        """A submission begins: refuse every further save of the record (status 3); the answers
        autosaved until then, as `load` reads them (one step: no save lands in between)."""

    def load(self, record_id: int) -> dict[int, SavedAnswer]:
        """The autosaved answers of the record: {question id: answer}."""

    def current_question(self, record_id: int) -> int | None:
        """The question the record's progress state says was answered last, if the store has one."""

    def release(self, record_id: int, *, submitted: bool) -> None:
        """The submission ended: if `submitted`, drop the autosave and keep the record
        closed to saves; if not, forget the cached status (saves resume)."""

    def release_and_enqueue(
        self, record_id: int, queue: ReportQueue
    ) -> tuple[Exception | None, Exception | None]:
        """The submission committed: `release(record_id, submitted=True)`, then
        `queue.enqueue(record_id)`, in one round trip where the queue shares the store's server.
        Never raises: each step's error (AutosaveUnavailable, the queue's), or None when it was done."""


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
            ids = frozenset(uow.questions.active_ids())
        with self._lock:
            self._ids, self._read_at = ids, self.clock()
        return ids

    def clear(self) -> None:
        with self._lock:
            self._ids = None


def _record_status(uow: UnitOfWork, user_id: int, record_id: int) -> int:
    """The status of the caller's live record (one SELECT by primary key); else RecordNotFound."""
    with uow:
        row = uow.records.owner_and_status(record_id)
    if row is None or row[2] or row[0] != user_id:
        raise RecordNotFound()
    return row[1]


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
