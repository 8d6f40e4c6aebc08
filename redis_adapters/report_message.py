"""The report job message, exactly as the original .NET system writes it.

    {"RecordId": 12345, "RetryCount": 0, "EnqueueTime": "2025-01-15T10:30:00"}

PascalCase, compact JSON. A dead letter (`report:queue:dead`) carries three more fields,
which the .NET side ignores: ``"DeadAt"`` (ISO-8601, UTC), ``"LastError"`` (exception
type and message, at most 500 characters) and ``"Attempts"``. EnqueueTime is any
ISO-8601 date-time (with or without a fraction of up to 7 digits, with or without an
offset); its text is kept verbatim, so
decoding and encoding again gives back the same RecordId, RetryCount and EnqueueTime.
This module is pure (no I/O, no Dramatiq); `ReportCodec` (codec.py) plugs it into the broker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from services.domain.errors import MiAssessmentError
from services.domain.limits import MAX_ID, is_strict_int

#: RecordId is a .NET long / PostgreSQL bigint.
MAX_RECORD_ID = MAX_ID
#: RetryCount is a .NET int.
MAX_RETRY_FIELD = 2**31 - 1

#: A job's fields, in the .NET producer's order; a dead letter adds DeadAt, LastError and
#: Attempts after them (the broker's `DeadMark`).
FIELDS = ("RecordId", "RetryCount", "EnqueueTime")

#: The member holding a job's key for the index `report:queue:jobs`: the broker's Lua scripts
#: read the top-level RecordId as `decode` does (a positive integer, or no key at all).
JOB_KEY_FIELD = "RecordId"


class InvalidReportMessage(MiAssessmentError):
    """A report job that cannot be decoded (ReportCodec hands the broker its own
    `InvalidMessage` for it, so the payload is quarantined)."""


@dataclass(frozen=True)
class DeadMark:
    """Why and when a job was dead-lettered (the broker's `dead_letter` option)."""

    dead_at: str
    last_error: str | None
    attempts: int | None

    def as_option(self) -> dict[str, Any]:
        return {"dead_at": self.dead_at, "error": self.last_error, "attempts": self.attempts}

    @classmethod
    def from_option(cls, option: object) -> DeadMark | None:
        if not isinstance(option, dict) or not isinstance(option.get("dead_at"), str):
            return None
        error, attempts = option.get("error"), option.get("attempts")
        return cls(
            dead_at=option["dead_at"],
            last_error=error if isinstance(error, str) else None,
            attempts=attempts if is_strict_int(attempts) else None,
        )


@dataclass(frozen=True)
class ReportQueueMessage:
    record_id: int
    retry_count: int
    #: The producer's text, kept as written (see `enqueued_at` for the parsed value).
    enqueue_time: str
    #: Set on a dead letter only.
    dead: DeadMark | None = None

    @classmethod
    def new(cls, record_id: int, *, now: datetime | None = None) -> ReportQueueMessage:
        """A first attempt (RetryCount 0) enqueued now, in local time with its offset."""
        moment = (now or datetime.now()).astimezone()
        return cls(_check_record_id(record_id), 0, moment.isoformat(timespec="microseconds"))

    @property
    def enqueued_at(self) -> datetime:
        return datetime.fromisoformat(self.enqueue_time)

    def retried(self, retry_count: int) -> ReportQueueMessage:
        """The same job for a later attempt: RecordId and EnqueueTime unchanged."""
        return replace(self, retry_count=retry_count)

    def encode(self) -> str:
        fields: dict[str, Any] = {
            "RecordId": self.record_id,
            "RetryCount": self.retry_count,
            "EnqueueTime": self.enqueue_time,
        }
        if self.dead is not None:
            fields.update(
                DeadAt=self.dead.dead_at, LastError=self.dead.last_error, Attempts=self.dead.attempts
            )
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str | bytes) -> ReportQueueMessage:
        try:
            # UTF-8 only (json.loads would also take UTF-16 or -32 bytes, or a BOM, which the
            # job index's reading of RecordId does not: one reading, or none).
            data = json.loads(raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidReportMessage(f"not JSON: {exc}") from None
        except RecursionError:
            # A few KB of nested brackets exhaust the parser's stack: bad data, not a crash.
            raise InvalidReportMessage("not JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise InvalidReportMessage(f"not a JSON object but {type(data).__name__}")
        missing = [name for name in FIELDS if name not in data]
        if missing:
            raise InvalidReportMessage(f"missing field(s) {', '.join(missing)}")
        record_id = _check_record_id(data["RecordId"])
        retry_count = data["RetryCount"]
        if not is_strict_int(retry_count) or not 0 <= retry_count <= MAX_RETRY_FIELD:
            raise InvalidReportMessage(f"RetryCount must be an integer >= 0, got {retry_count!r}")
        enqueue_time = data["EnqueueTime"]
        if not isinstance(enqueue_time, str):
            raise InvalidReportMessage(f"EnqueueTime must be an ISO-8601 string, got {enqueue_time!r}")
        try:
            datetime.fromisoformat(enqueue_time)
        except ValueError:
            raise InvalidReportMessage(f"EnqueueTime is not ISO-8601: {enqueue_time!r}") from None
        # The dead-letter fields are ours, not the .NET contract's: malformed ones are ignored.
        dead = DeadMark.from_option(
            {"dead_at": data.get("DeadAt"), "error": data.get("LastError"), "attempts": data.get("Attempts")}
        )
        return cls(record_id, retry_count, enqueue_time, dead)


def _check_record_id(value: Any) -> int:
    if not is_strict_int(value) or not 1 <= value <= MAX_RECORD_ID:
        raise InvalidReportMessage(f"RecordId must be an integer in 1..2^63-1, got {value!r}")
    return int(value)
