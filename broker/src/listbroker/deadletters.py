"""A queue's dead letters and quarantined payloads, for operators, on any client, without a broker.

A quarantined payload is kept verbatim in `Q:invalid`; why and when it was quarantined
are beside it, in the hash `Q:invalid:meta` under `invalid_meta_field(payload)` (written
in the same step as the push, dropped with the payload's last copy).

A dead letter is the message as its codec writes it, with the option `dead_letter`
(`DEAD_LETTER_OPTION`: the last error, the attempts made, when) that the broker adds
when it gives up (see `dead_letter_option`); a codec that writes options keeps it, so
an entry of `Q:dead` says why and when it died. Requeueing swaps an entry for a fresh
payload in one atomic step that also keeps the job index (`Q:jobs`) right; entries
are named by their exact bytes, so nothing else in the list is ever touched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from listbroker.keys import QueueKeys
from listbroker.scripts import source

#: Message option carrying a dead letter's last error, attempts and time.
DEAD_LETTER_OPTION = "dead_letter"
#: Longest error text kept in a dead letter (exception type and message).
MAX_DEAD_ERROR_CHARS = 500


def dead_letter_option(error: BaseException | str | None, attempts: int | None) -> dict[str, Any]:
    """The `dead_letter` option: `{"error", "attempts", "dead_at"}`, the time in UTC (ISO-8601)."""
    if isinstance(error, BaseException):
        text: str | None = f"{type(error).__name__}: {error}"
    else:
        text = error
    return {
        "error": None if text is None else text[:MAX_DEAD_ERROR_CHARS],
        "attempts": attempts,
        "dead_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
    }


#: Hex digits of a quarantined payload's field in `Q:invalid:meta` (of its SHA-256).
META_FIELD_DIGITS = 16
#: Longest part of a quarantined payload written to the log.
MAX_LOGGED_PAYLOAD = 500


def invalid_meta_field(payload: bytes) -> str:
    """The payload's field in `Q:invalid:meta`: the first hex digits of its SHA-256."""
    return hashlib.sha256(payload).hexdigest()[:META_FIELD_DIGITS]


def shown_payload(payload: bytes) -> str:
    """A payload as one line of text for a log: UTF-8, a byte that is not as a \\xNN escape, a
    character that does not print (a control character, a line break) as Python escapes it."""
    text = payload.decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True)
class Quarantine:
    """Why and when a payload was quarantined (`Q:invalid:meta`)."""

    #: The Redis server's clock, UTC.
    at: datetime
    reason: str


def _quarantine(value: Any) -> Quarantine | None:
    """A field of `Q:invalid:meta` read back; None when missing or not as quarantine.lua writes it."""
    if value is None:
        return None
    try:
        meta = json.loads(value)
        return Quarantine(datetime.fromtimestamp(int(meta["at"]) / 1000, UTC), str(meta["reason"]))
    except (ValueError, TypeError, KeyError, OverflowError):
        return None


#: The largest index Redis accepts in a range (a signed 64-bit integer).
MAX_RANGE_INDEX = 2**63 - 1


def range_stop(offset: int, limit: int) -> int:
    """The last index of a page of `limit` from `offset`, within what Redis accepts: near
    2**63 `offset + limit - 1` does not fit, and Redis refused the whole range."""
    return min(offset + limit - 1, MAX_RANGE_INDEX)


class DeadLetters:
    """The dead-letter list `Q:dead` and the quarantine `Q:invalid` of one queue.

    `job_key_field` must be the one of the queue's codec ('' when it keeps no index).
    Redis errors are raised as they are.
    """

    def __init__(self, client: redis.Redis, keys: QueueKeys, *, job_key_field: str) -> None:
        self.client = client
        self.keys = keys
        self.job_key_field = job_key_field
        self._requeue = client.register_script(source("requeue_dead"))
        self._remove_invalid = client.register_script(source("remove_invalid"))
        self._enqueue_reviving = client.register_script(source("enqueue_reviving"))

    # ------------------------------------------------------------------ dead letters

    def dead_page(self, offset: int, limit: int) -> tuple[int, list[bytes]]:
        """(entries in all, up to `limit` entries from `offset`), newest first."""
        return self._page(self.keys.dead, offset, limit)

    def all_dead(self) -> list[bytes]:
        return _raw_list(self.client.lrange(self.keys.dead, 0, -1))

    def requeue(self, swaps: Sequence[tuple[bytes, str | bytes]]) -> list[bool]:
        """For each (dead entry, fresh payload): remove the entry and LPUSH the payload to the
        queue, counted in the index (a `dead` mark of its job key is replaced), all in one
        atomic step. An entry no longer in the list is skipped (False): nothing is pushed for it.
        """
        if not swaps:
            return []
        args: list[str | bytes] = [self.job_key_field]
        for old, new in swaps:
            args += [old, new]
        done = self._requeue(
            keys=[self.keys.dead, self.keys.queue, self.keys.jobs, self.keys.counted], args=args
        )
        return [bool(flag) for flag in done]

    def delete_dead(self, entries: Sequence[bytes]) -> list[bool]:
        """Remove one occurrence of each entry; False for an entry no longer there."""
        return self._remove(self.keys.dead, entries)

    def enqueue_reviving(self, payloads: Sequence[str | bytes]) -> int:
        """LPUSH the payloads (counted in the index) and drop every dead letter of their job
        keys, in one atomic step; the number of dead letters dropped."""
        if not payloads:
            return 0
        return int(
            self._enqueue_reviving(
                keys=[self.keys.queue, self.keys.jobs, self.keys.dead, self.keys.counted],
                args=[self.job_key_field, *payloads],
            )
        )

    # ------------------------------------------------------------------ quarantine

    def invalid_page(self, offset: int, limit: int) -> tuple[int, list[bytes]]:
        return self._page(self.keys.invalid, offset, limit)

    def all_invalid(self) -> list[bytes]:
        return _raw_list(self.client.lrange(self.keys.invalid, 0, -1))

    def quarantines(self, entries: Sequence[bytes]) -> list[Quarantine | None]:
        """Why and when each entry was quarantined (None: not known, e.g. quarantined by an
        older version, or gone)."""
        if not entries:
            return []
        values = self.client.hmget(self.keys.invalid_meta, [invalid_meta_field(raw) for raw in entries])
        return [_quarantine(value) for value in values]

    def delete_invalid(self, entries: Sequence[bytes]) -> list[bool]:
        """Remove one occurrence of each entry (and, with its last copy, its meta); False for
        an entry no longer there."""
        if not entries:
            return []
        args: list[str | bytes] = []
        for raw in entries:
            args += [raw, invalid_meta_field(raw)]
        done = self._remove_invalid(keys=[self.keys.invalid, self.keys.invalid_meta], args=args)
        return [bool(flag) for flag in done]

    def purge_invalid(self) -> int:
        """Drop the whole quarantine and its meta; how many entries it held (atomically)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(self.keys.invalid)
        pipe.delete(self.keys.invalid, self.keys.invalid_meta)
        count, _ = pipe.execute()
        return int(count)

    # ------------------------------------------------------------------ shared

    def _page(self, key: str, offset: int, limit: int) -> tuple[int, list[bytes]]:
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(key)
        pipe.lrange(key, offset, range_stop(offset, limit))
        total, raws = pipe.execute()
        return int(total), _raw_list(raws)

    def _remove(self, key: str, entries: Sequence[bytes]) -> list[bool]:
        if not entries:
            return []
        pipe = self.client.pipeline(transaction=True)
        for raw in entries:
            pipe.lrem(key, 1, raw)  # type: ignore[arg-type]  # redis-py takes bytes values
        return [bool(n) for n in pipe.execute()]


def _raw_list(values: Any) -> list[bytes]:
    """A reply of LRANGE on a client without decode_responses: the entries' exact bytes."""
    return [bytes(value) for value in values]
