"""What the services return: frozen dataclasses, so ORM objects never leave a session.

The web tier serialises these; the worker side only looks at outcomes. Field names are
the HTTP API's, camelCased by the response models that read them (web/response_models.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from services.domain.opsmodel import ItemOutcome

T = TypeVar("T")


@dataclass(frozen=True)
class ScaleOptionView:
    """One answer of the Likert scale and its label (the questionnaire's own)."""

    value: int
    label: str


@dataclass(frozen=True)
class QuestionView:
    id: int
    dimension_code: str
    dimension_name: str
    text: str
    sort_order: int
    #: The scale's answers, 1..5, with their labels.
    options: list[ScaleOptionView]


@dataclass(frozen=True)
class RecordView:
    id: int
    user_id: int
    status: int
    status_text: str
    created_at: datetime
    started_at: datetime | None
    submitted_at: datetime | None
    completed_at: datetime | None
    #: Status 4: `GET /report` answers with the report.
    report_ready: bool


@dataclass(frozen=True)
class RecordPage:
    """One page of the user's records, newest first; pass `next_cursor` to get the next one.

    A cursor (the last id shown) rather than a page number: records created meanwhile
    come before the first page, so they never shift a later page.
    """

    items: list[RecordView]
    #: The user's live records in all.
    total: int
    size: int
    #: None on the last page.
    next_cursor: int | None


@dataclass(frozen=True)
class AnswerView:
    question_id: int
    value: int
    answered_at: datetime


@dataclass(frozen=True)
class RecordDetailView(RecordView):
    """A record with what resuming it needs: its answers so far and where the user was."""

    #: Stored answers overlaid by the autosaved ones (as a submission would take them), by question order.
    answers: list[AnswerView]
    answered_count: int
    total_questions: int
    #: The question answered last (the autosave's progress, else the database's).
    current_question_id: int | None
    #: The first active question without an answer, in questionnaire order; None when all are answered.
    next_question_id: int | None
    #: False when the autosave store (Redis) could not be read: the answers are the
    #: database's, and the last few seconds of saves may be missing from them.
    autosave_available: bool


@dataclass(frozen=True)
class SubmitResult:
    record_id: int
    status: int
    #: False when the answers were saved but the report job could not be queued; the
    #: record stays in status 3 and the reconciler queues the job once Redis answers.
    enqueued: bool


@dataclass(frozen=True)
class SaveAnswersResult:
    """What an autosave returns: it is in Redis, the database follows within a flush interval."""

    record_id: int
    #: Answers taken from this request.
    saved: int
    #: Distinct questions answered so far in this record's autosave.
    answered_count: int
    #: The save time (the Redis server's clock), also the answers' `answered_at`.
    saved_at: datetime


@dataclass(frozen=True)
class ResultStatusView:
    record_id: int
    status: int
    status_text: str
    description: str


@dataclass(frozen=True)
class DimensionScoreView:
    code: str
    name: str
    raw_score: int
    score: float
    rank: int
    level: str
    #: What the dimension measures.
    description: str
    #: What this level of this dimension means (the questionnaire's text).
    interpretation: str
    #: Two or three concrete things to do.
    suggestions: list[str]


@dataclass(frozen=True)
class DimensionRefView:
    code: str
    name: str
    score: float
    level: str


@dataclass(frozen=True)
class ReportView:
    record_id: int
    user_id: int
    completed_at: datetime | None
    #: Ordered by rank, the strongest dimension first.
    dimensions: list[DimensionScoreView]
    #: Dimension codes, strongest first.
    top_dimensions: list[str]
    summary: str
    #: The strongest dimensions (levels 优势/较强, at most three; else the first one).
    strengths: list[DimensionRefView]
    #: The weakest dimensions below those levels, weakest first (at most three).
    areas_to_develop: list[DimensionRefView]
    #: The version of the questionnaire data the texts come from.
    questionnaire_version: int
    #: The report as an HTML page (a signed link, valid for a while); set by the web tier.
    page_url: str | None = None


@dataclass(frozen=True)
class AdminRecordRow:
    id: int
    user_id: int
    status: int
    status_name: str
    created_at: datetime
    submitted_at: datetime | None
    completed_at: datetime | None
    is_deleted: bool


@dataclass(frozen=True)
class RecordFilter:
    """Filters of the admin record list; `None` means "any".

    The creation range is half-open: ``created_from <= created_at < created_to``. A
    naive datetime is taken as UTC.
    """

    status: int | None = None
    user_id: int | None = None
    include_deleted: bool = False
    created_from: datetime | None = None
    created_to: datetime | None = None


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    page: int
    page_size: int

    @property
    def pages(self) -> int:
        """Number of pages for `total` items (0 when there are none)."""
        return -(-self.total // self.page_size) if self.page_size > 0 else 0


@dataclass(frozen=True)
class BatchRegenerateResult:
    success_count: int
    skipped_count: int
    #: One outcome per requested id, in request order (regenerated, or skipped with code and reason).
    items: tuple[ItemOutcome, ...] = ()


@dataclass(frozen=True)
class EventView:
    """One event of the log (admin API)."""

    id: str
    event_type: str
    occurred_at: datetime
    record_id: int | None
    user_id: int | None
    actor: str | None
    data: dict[str, Any]
