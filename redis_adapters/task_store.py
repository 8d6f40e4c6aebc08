"""Admin tasks in Redis: implements `services.usecases.regeneration_tasks.TaskStore`.

A task is the hash `admin:task:<id>` (`{admin}:task:<id>` when hash-tagged), kept
TASK_TTL_S after its last change; its one Dramatiq message goes to the `admin` queue in
the same step as the hash, so there is never a message without its task nor a queued
task without its message. That step (lua/task_create.lua) also bounds the tasks:

* at most one task per filter is queued or running: `admin:tasks:filter:<digest of the
  filter>` names it; a second call with the same filter gets that task's id back
  (`TaskAlreadyActive`) instead of queueing the same records again;
* at most `MAX_ACTIVE_TASKS` tasks are queued or running (the sorted set
  `admin:tasks:active`); one more is refused (`TooManyTasks`).

A task holds its filter and its place while it makes progress; a task silent for
`HOLD_MS` (its message lost, every worker stopped) no longer does. Every key is of the
`admin` family, so each step runs on one Redis Cluster slot.

A hash that cannot be read (another type at the key, a state or number this version does
not know) is a task in state `unreadable`, shown as such, never an error of the page.
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import cast

import dramatiq
import redis
from listbroker import DramatiqCodec

from redis_adapters.keyspace import Keyspace
from redis_adapters.lua_scripts import lua_source
from redis_adapters.queues import ADMIN_QUEUE_NAME, REGENERATE_MATCHING_ACTOR_NAME
from services.usecases.regeneration_tasks import (
    TASK_TTL_S,
    MatchFilter,
    Task,
    TaskAlreadyActive,
    TaskState,
    TooManyTasks,
    describe,
)

#: Most tasks queued or running at once (each may walk every record of a status).
MAX_ACTIVE_TASKS = 10
#: How long a task that reports no progress keeps its filter and its place (1 hour: a page
#: of 1,000 records takes about a second; a task waits at most behind MAX_ACTIVE_TASKS - 1).
HOLD_MS = 3600 * 1000

_CREATE = lua_source("redis_adapters", "task_create")
_TOUCH = lua_source("redis_adapters", "task_touch")
_PAGE_DONE = lua_source("redis_adapters", "task_page_done")


def _time(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat() if value else ""


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _int(value: str | None) -> int | None:
    return int(value) if value else None


def filter_digest(match: MatchFilter) -> str:
    """Names a filter: equal filters (the same records) have the same digest."""
    return hashlib.sha256(describe(match).encode()).hexdigest()[:32]


def task_message(task_id: str) -> dramatiq.Message[None]:
    """The worker's message for a task (Dramatiq's own encoding: the admin queue has no codec)."""
    return dramatiq.Message(
        queue_name=ADMIN_QUEUE_NAME,
        actor_name=REGENERATE_MATCHING_ACTOR_NAME,
        args=(task_id,),
        kwargs={},
        options={},
    )


def unreadable_task(task_id: str, why: str) -> Task:
    return Task(
        task_id=task_id,
        state=TaskState.UNREADABLE,
        filter=MatchFilter(status=0),
        matched=0,
        max_id=0,
        error=f"任务数据无法读取：{why}",
    )


class RedisTaskStore:
    def __init__(self, client: redis.Redis, keys: Keyspace | None = None) -> None:
        self.client = client
        self.keys = keys or Keyspace.of()
        self._create = client.register_script(_CREATE)
        self._touch = client.register_script(_TOUCH)
        self._page_done = client.register_script(_PAGE_DONE)

    def key(self, task_id: str) -> str:
        return self.keys.task_prefix + task_id

    def filter_key(self, digest: str) -> str:
        return self.keys.task_filter_prefix + digest

    def create(self, task: Task) -> None:
        match = task.filter
        digest = filter_digest(match)
        fields: dict[str, str | int] = {
            "state": str(task.state),
            "status": match.status,
            "submittedFrom": _time(match.submitted_from),
            "submittedTo": _time(match.submitted_to),
            "userId": "" if match.user_id is None else match.user_id,
            "matched": task.matched,
            "maxId": task.max_id,
            "cursor": task.cursor,
            "pages": 0,
            "regenerated": 0,
            "skipped": 0,
            "actor": task.actor,
            "createdAt": _time(task.created_at),
            "filter": digest,
        }
        payload = DramatiqCodec().encode(task_message(task.task_id))
        pairs = [value for item in fields.items() for value in item]
        reply = cast(
            list[bytes | int],
            self._create(
                keys=[
                    self.key(task.task_id),
                    self.filter_key(digest),
                    self.keys.tasks_active,
                    self.keys.admin.queue,
                ],
                args=[
                    int(time.time() * 1000),
                    HOLD_MS,
                    MAX_ACTIVE_TASKS,
                    task.task_id,
                    payload,
                    TASK_TTL_S,
                    *pairs,
                ],
            ),
        )
        outcome, detail = int(reply[0]), reply[1]
        text = detail.decode() if isinstance(detail, bytes) else str(detail)
        if outcome == 1:
            raise TaskAlreadyActive(text)
        if outcome == 2:
            raise TooManyTasks(int(text))

    def get(self, task_id: str) -> Task | None:
        try:
            raw = cast(dict[bytes, bytes], self.client.hgetall(self.key(task_id)))
        except redis.ResponseError as exc:  # WRONGTYPE: something else was stored at the key
            return unreadable_task(task_id, str(exc).split(" ", 1)[0])
        if not raw:
            return None
        try:
            return self._task(task_id, {k.decode(): v.decode() for k, v in raw.items()})
        except (KeyError, ValueError, OverflowError) as exc:  # UnicodeDecodeError is a ValueError
            return unreadable_task(task_id, type(exc).__name__)

    @staticmethod
    def _task(task_id: str, h: dict[str, str]) -> Task:
        return Task(
            task_id=task_id,
            state=TaskState(h["state"]),
            filter=MatchFilter(
                status=int(h["status"]),
                submitted_from=_parse_time(h.get("submittedFrom")),
                submitted_to=_parse_time(h.get("submittedTo")),
                user_id=_int(h.get("userId")),
            ),
            matched=int(h["matched"]),
            max_id=int(h["maxId"]),
            cursor=int(h.get("cursor") or 0),
            pages=int(h.get("pages") or 0),
            regenerated=int(h.get("regenerated") or 0),
            skipped=int(h.get("skipped") or 0),
            actor=h.get("actor", ""),
            created_at=_parse_time(h.get("createdAt")),
            started_at=_parse_time(h.get("startedAt")),
            finished_at=_parse_time(h.get("finishedAt")),
            error=h.get("error") or None,
        )

    def _touched(self, task_id: str, *, ended: bool) -> None:
        digest = self.client.hget(self.key(task_id), "filter")
        digest_text = digest.decode("utf-8", "replace") if isinstance(digest, bytes) else ""
        self._touch(
            keys=[self.filter_key(digest_text or "none"), self.keys.tasks_active],
            args=[int(time.time() * 1000), HOLD_MS, task_id, "1" if ended else "0"],
        )

    def started(self, task_id: str, at: datetime) -> None:
        key = self.key(task_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, "state", str(TaskState.RUNNING))
        pipe.hsetnx(key, "startedAt", _time(at))
        pipe.expire(key, TASK_TTL_S)
        pipe.execute()
        self._touched(task_id, ended=False)

    def page_done(self, task_id: str, after: int, cursor: int, regenerated: int, skipped: int) -> bool:
        recorded = self._page_done(
            keys=[self.key(task_id)], args=[after, cursor, regenerated, skipped, TASK_TTL_S]
        )
        self._touched(task_id, ended=False)
        return bool(recorded)

    def finished(self, task_id: str, state: TaskState, at: datetime, error: str | None = None) -> None:
        key = self.key(task_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping={"state": str(state), "finishedAt": _time(at), "error": error or ""})
        pipe.expire(key, TASK_TTL_S)
        pipe.execute()
        self._touched(task_id, ended=True)
