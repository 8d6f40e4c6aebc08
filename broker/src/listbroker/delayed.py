"""A queue's delayed messages (`Q:delayed`: retries waiting out their schedule, delayed sends),
for operators, on any client, without a broker.

A member is `<16 hex>|<payload>` (scripts.DELAYED_PREFIX_LEN), scored by its due time in
ms; the hex prefix, unique per member, names it (`DelayedEntry.handle`). Releasing a
message now and removing one are each one atomic step that names members by their exact
bytes, so a message the scheduler released meanwhile is reported as gone, never pushed
twice. Redis errors are raised as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import cast

import redis

from listbroker.deadletters import range_stop
from listbroker.keys import QueueKeys
from listbroker.scripts import DELAYED_PREFIX_LEN, source

_MEMBER = re.compile(rb"([0-9a-f]{16})\|")


@dataclass(frozen=True)
class DelayedEntry:
    #: The member's unique hex prefix; None for a member the broker did not write (no prefix).
    handle: str | None
    member: bytes
    #: Aware UTC; None for a score no calendar holds (anyone may ZADD 1e20): shown as unreadable.
    due_at: datetime | None

    @property
    def payload(self) -> bytes:
        """The message as it will be pushed to the queue (the member without its prefix)."""
        return self.member[DELAYED_PREFIX_LEN:] if self.handle else self.member


class Removed(IntEnum):
    """What removing one delayed message did."""

    GONE = 0  # no longer delayed (released by the scheduler, or removed already)
    REMOVED = 1  # removed; another job of its key lives on
    LAST = 2  # removed, and it was its key's last job: the key carries the dead mark now


def entry(member: bytes, score: float) -> DelayedEntry:
    match = _MEMBER.match(member)
    return DelayedEntry(
        handle=match.group(1).decode() if match else None,
        member=member,
        due_at=_due(score),
    )


def _due(score_ms: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(score_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None


class DelayedMessages:
    """The delayed set `Q:delayed` of one queue. `job_key_field`: as for `DeadLetters`."""

    def __init__(self, client: redis.Redis, keys: QueueKeys, *, job_key_field: str) -> None:
        self.client = client
        self.keys = keys
        self.job_key_field = job_key_field
        self._release = client.register_script(source("release_delayed"))
        self._remove = client.register_script(source("remove_delayed"))

    def page(self, offset: int, limit: int) -> tuple[int, list[DelayedEntry]]:
        """(messages delayed in all, up to `limit` of them from `offset`), soonest due first."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zcard(self.keys.delayed)
        pipe.zrange(self.keys.delayed, offset, range_stop(offset, limit), withscores=True)
        total, members = pipe.execute()
        return int(total), [entry(bytes(m), float(s)) for m, s in members]

    def find(self, handles: Sequence[str]) -> dict[str, DelayedEntry]:
        """The entries of these handles still delayed (unknown handles left out): one ZSCAN
        per handle, matching its prefix, so the set is never read whole."""
        found: dict[str, DelayedEntry] = {}
        for handle in dict.fromkeys(handles):
            if not re.fullmatch(r"[0-9a-f]{16}", handle):
                continue
            for member, score in self.client.zscan_iter(self.keys.delayed, match=f"{handle}|*", count=1000):
                found[handle] = entry(bytes(cast(bytes, member)), float(score))
                break
        return found

    def release_now(self, members: Sequence[bytes]) -> list[bool]:
        """Push these delayed messages to the queue now; False for one no longer delayed."""
        if not members:
            return []
        done = self._release(keys=[self.keys.delayed, self.keys.queue, self.keys.counted], args=list(members))
        return [bool(flag) for flag in done]

    def remove(self, members: Sequence[bytes]) -> list[Removed]:
        """End these delayed messages (see `Removed`)."""
        if not members:
            return []
        done = self._remove(
            keys=[self.keys.delayed, self.keys.jobs, self.keys.queue, self.keys.counted],
            args=[self.job_key_field, *members],
        )
        return [Removed(int(flag)) for flag in done]
