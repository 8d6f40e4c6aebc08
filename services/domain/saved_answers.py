"""A saved answer and the autosave hash's codec: what a save stores, read back verbatim-safe.

Pure: the value a save records (`SavedAnswer`, its save time in ms of the Redis clock), the
outcomes of a save, the merge a submission makes (stored answers, overlaid by the autosaved
ones, overlaid by the body), and the strict decoding of an autosave hash
(`<question id>` -> `<value>:<save ms>` in plain ASCII decimals).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from services.domain.errors import AutosaveUnavailable, ParamError
from services.domain.scoring import MAX_VALUE, MIN_VALUE, format_ids, validate_partial_answers

logger = logging.getLogger(__name__)

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
