"""`services.domain.opsmodel.QueueOperations` on Redis: the report queue's dead letters and quarantine.

Entries are named by a digest of their bytes (`entry_handle`), so a handle stays valid
while other entries come and go, and an operation touches exactly the entry named.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

import redis
from listbroker import DeadLetters, DelayedEntry, DelayedMessages, JobIndex, QueueKeys, Removed
from listbroker.delayed import entry as delayed_entry

from redis_adapters.queue_figures import as_local
from redis_adapters.queues import REPORT_QUEUE_NAME
from redis_adapters.report_message import JOB_KEY_FIELD, InvalidReportMessage, ReportQueueMessage
from services.domain.errors import QueueUnavailable
from services.domain.opsmodel import DeadLetter, DelayedRetry, InvalidPayload

#: Hex digits of an entry's handle.
HANDLE_DIGITS = 16


def entry_handles(raws: Sequence[bytes]) -> list[str]:
    """The handle of each entry: its digest, with ".2", ".3" ... for repeats of the same bytes."""
    seen: dict[str, int] = {}
    handles = []
    for raw in raws:
        digest = hashlib.sha256(raw).hexdigest()[:HANDLE_DIGITS]
        seen[digest] = seen.get(digest, 0) + 1
        handles.append(digest if seen[digest] == 1 else f"{digest}.{seen[digest]}")
    return handles


def shown(raw: bytes) -> str:
    """The entry as text: UTF-8, any other byte as a \\xNN escape."""
    return raw.decode("utf-8", errors="backslashreplace")


def dead_letter(handle: str, raw: bytes) -> DeadLetter:
    """A dead letter as operators see it; an entry that is not a report job still shows, verbatim."""
    try:
        message = ReportQueueMessage.decode(raw)
    except InvalidReportMessage:
        return DeadLetter(handle, None, 0, None, None, shown(raw))
    dead = message.dead
    dead_at = None
    attempts = message.retry_count + 1
    if dead is not None:
        try:
            dead_at = datetime.fromisoformat(dead.dead_at)
        except ValueError:
            dead_at = None
        if dead_at is not None and dead_at.tzinfo is None:
            dead_at = None
        attempts = dead.attempts if dead.attempts is not None else attempts
    return DeadLetter(
        message_id=handle,
        record_id=message.record_id,
        attempts=attempts,
        last_error=dead.last_error if dead else None,
        dead_at=dead_at,
        raw=shown(raw),
    )


def delayed_retry(item: DelayedEntry) -> DelayedRetry:
    """A delayed job as operators see it; one the codec cannot read still shows, verbatim."""
    raw = shown(item.payload)
    try:
        message = ReportQueueMessage.decode(item.payload)
    except InvalidReportMessage:
        return DelayedRetry(item.handle, None, None, item.due_at, None, raw)
    return DelayedRetry(
        message_id=item.handle,
        record_id=message.record_id,
        attempts=message.retry_count,
        due_at=item.due_at,
        enqueued_at=as_local(message.enqueued_at),
        raw=raw,
    )


@contextmanager
def _queue_errors() -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise QueueUnavailable(f"report queue unavailable: {exc}") from exc


class RedisQueueOperations:
    def __init__(self, client: redis.Redis, keys: QueueKeys | None = None) -> None:
        keys = keys or QueueKeys.for_queue(REPORT_QUEUE_NAME)
        self.store = DeadLetters(client, keys, job_key_field=JOB_KEY_FIELD)
        self.delayed = DelayedMessages(client, keys, job_key_field=JOB_KEY_FIELD)
        self.index = JobIndex(
            client,
            queue_key=keys.queue,
            jobs_key=keys.jobs,
            counted_key=keys.counted,
            job_key_field=JOB_KEY_FIELD,
        )

    # ------------------------------------------------------------------ dead letters

    def dead_letters(self, offset: int, limit: int) -> tuple[int, list[DeadLetter]]:
        # Handles number repeats from the head of the list: read it up to the page's end.
        with _queue_errors():
            total, raws = self.store.dead_page(0, offset + limit)
        handles = entry_handles(raws)
        return total, [dead_letter(h, r) for h, r in list(zip(handles, raws, strict=True))[offset:]]

    def all_dead_letters(self) -> list[DeadLetter]:
        with _queue_errors():
            raws = self.store.all_dead()
        return [dead_letter(h, r) for h, r in zip(entry_handles(raws), raws, strict=True)]

    def requeue_dead(self, message_ids: Sequence[str]) -> dict[str, bool]:
        with _queue_errors():
            found = self._resolve(self.store.all_dead(), message_ids)
            swaps: list[tuple[str, bytes, str]] = []
            for handle, raw in found.items():
                try:
                    message = ReportQueueMessage.decode(raw)
                except InvalidReportMessage:
                    continue  # no record to queue a job for: left in place
                swaps.append((handle, raw, ReportQueueMessage.new(message.record_id).encode()))
            done = self.store.requeue([(raw, fresh) for _, raw, fresh in swaps])
        result = dict.fromkeys(message_ids, False)
        result.update({handle: ok for (handle, _, _), ok in zip(swaps, done, strict=True)})
        return result

    def delete_dead(self, message_ids: Sequence[str]) -> dict[str, bool]:
        with _queue_errors():
            found = self._resolve(self.store.all_dead(), message_ids)
            done = self.store.delete_dead(list(found.values()))
        result = dict.fromkeys(message_ids, False)
        result.update(dict(zip(found, done, strict=True)))
        return result

    def enqueue_reviving(self, record_ids: Sequence[int]) -> int:
        payloads = [ReportQueueMessage.new(record_id).encode() for record_id in record_ids]
        with _queue_errors():
            return self.store.enqueue_reviving(payloads)

    # ------------------------------------------------------------------ delayed retries

    def delayed_retries(self, offset: int, limit: int) -> tuple[int, list[DelayedRetry]]:
        with _queue_errors():
            total, items = self.delayed.page(offset, limit)
        return total, [delayed_retry(item) for item in items]

    def delayed_retries_of(self, record_id: int) -> list[DelayedRetry]:
        # One ZSCAN whose pattern holds the id's digits (Redis filters, the set is never read
        # whole), each match decoded to be sure it is the record's.
        delayed = self.delayed
        with _queue_errors():
            scanned = delayed.client.zscan_iter(delayed.keys.delayed, match=f"*{int(record_id)}*", count=1000)
            found = [delayed_retry(delayed_entry(bytes(member), float(score))) for member, score in scanned]
        mine = [r for r in found if r.record_id == record_id]
        return sorted(mine, key=lambda r: r.due_at.timestamp() if r.due_at else float("inf"))

    def retry_delayed_now(self, message_ids: Sequence[str]) -> dict[str, bool]:
        with _queue_errors():
            found = self.delayed.find(message_ids)
            done = self.delayed.release_now([item.member for item in found.values()])
        result = dict.fromkeys(message_ids, False)
        result.update(dict(zip(found, done, strict=True)))
        return result

    def delete_delayed(self, message_ids: Sequence[str]) -> dict[str, int | None]:
        with _queue_errors():
            found = self.delayed.find(message_ids)
            done = self.delayed.remove([item.member for item in found.values()])
        result: dict[str, int | None] = dict.fromkeys(message_ids)
        for (handle, item), removed in zip(found.items(), done, strict=True):
            if removed is Removed.GONE:
                continue
            record_id = delayed_retry(item).record_id
            result[handle] = record_id if removed is Removed.LAST and record_id is not None else 0
        return result

    def clear_dead_marks(self, record_ids: Sequence[int]) -> None:
        if record_ids:
            with _queue_errors():
                self.index.clear_dead_marks(list(record_ids))

    # ------------------------------------------------------------------ quarantine

    def invalid_payloads(self, offset: int, limit: int) -> tuple[int, list[InvalidPayload]]:
        with _queue_errors():
            total, raws = self.store.invalid_page(0, offset + limit)
            page = list(zip(entry_handles(raws), raws, strict=True))[offset:]
            why = self.store.quarantines([raw for _, raw in page])
        return total, [
            InvalidPayload(handle, shown(raw), q.reason if q else None, q.at if q else None)
            for (handle, raw), q in zip(page, why, strict=True)
        ]

    def delete_invalid(self, keys: Sequence[str]) -> dict[str, bool]:
        with _queue_errors():
            found = self._resolve(self.store.all_invalid(), keys)
            done = self.store.delete_invalid(list(found.values()))
        result = dict.fromkeys(keys, False)
        result.update(dict(zip(found, done, strict=True)))
        return result

    def purge_invalid(self) -> int:
        with _queue_errors():
            return self.store.purge_invalid()

    @staticmethod
    def _resolve(raws: Sequence[bytes], handles: Sequence[str]) -> dict[str, bytes]:
        """The entries named by `handles` that are in `raws` (unknown handles left out)."""
        by_handle = dict(zip(entry_handles(raws), raws, strict=True))
        return {h: by_handle[h] for h in dict.fromkeys(handles) if h in by_handle}
