"""The one error hierarchy of the product.

Every error a caller can act on is a `ServiceError` carrying the numeric code of the
original .NET API, which its clients already handle (1001 ParamError, 2005
InvalidOperation, 3241 AssessmentRecordNotFound), and a message meant for the client. The web tier maps codes
to HTTP statuses in one place; the worker side logs them.
"""

from __future__ import annotations

from typing import ClassVar


class MiAssessmentError(Exception):
    """Base of every exception raised on purpose by this code base."""


class DatabaseUnavailable(MiAssessmentError):
    """PostgreSQL could not be reached when a unit of work began: nothing was done.

    Distinct from a failure in the middle of a transaction, so a caller can wait for
    the database instead of spending an attempt (the worker) or answer 503 (the web).
    """


class ServiceError(MiAssessmentError):
    code: ClassVar[int] = 5000
    default_message: ClassVar[str] = "服务内部错误"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)


class ParamError(ServiceError):
    """Bad input: a missing, malformed or out-of-range parameter."""

    code = 1001
    default_message = "参数错误"


class InvalidOperation(ServiceError):
    """The record is not in a state that allows the operation."""

    code = 2005
    default_message = "当前状态不允许该操作"


class RecordNotFound(ServiceError):
    """The record does not exist, is soft-deleted, or belongs to someone else."""

    code = 3241
    default_message = "测评记录不存在"


class QueueUnavailable(ServiceError):
    """The report queue (Redis) could not take the job."""

    code = 5003
    default_message = "报告队列暂不可用，请稍后重试"


class ResetNotQueued(QueueUnavailable):
    """A regeneration reset its record to 3 (committed) but the queue refused its job.

    Still 5003 to the caller; the record stays in 3 and the reconciler queues its job. The
    reset happened, so the record's timeline must show it (`report.regenerated`, enqueued false).
    """


class AutosaveUnavailable(QueueUnavailable):
    """The answers saved during the assessment (Redis) could not be read or written.

    Same code as the queue (5003, a dependency is down); its own message, because the
    user can act on it: retry, or submit every answer in the body.
    """

    default_message = "答案暂存服务暂不可用，请稍后重试或提交全部答案"


#: Messages of the original .NET API, used verbatim: its clients show the same texts.
MSG_REGENERATE_NOT_ALLOWED = "当前状态不允许重新生成"
MSG_EMPTY_ID_LIST = "记录ID列表不能为空"
