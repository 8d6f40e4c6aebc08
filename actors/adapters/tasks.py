"""Admin tasks in Redis: implements `services.regeneration_tasks.TaskStore`.

A task is the hash `admin:task:<id>` (`{admin}:task:<id>` when hash-tagged), kept
TASK_TTL_S after its last change; its one Dramatiq message goes to the `admin` queue in
the same MULTI as the hash (both keys in the `admin` family, so one Cluster slot), so
there is never a message without its task nor a queued task without its message.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dramatiq
import redis

from actors.adapters.keys import Keyspace
from actors.broker import DramatiqCodec
from actors.constants import ADMIN_QUEUE_NAME, REGENERATE_MATCHING_ACTOR_NAME
from services.regeneration_tasks import TASK_TTL_S, MatchFilter, Task, TaskState


def _time(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat() if value else ""


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _int(value: str | None) -> int | None:
    return int(value) if value else None


def task_message(task_id: str) -> dramatiq.Message[None]:
    """The worker's message for a task (Dramatiq's own encoding: the admin queue has no codec)."""
    return dramatiq.Message(
        queue_name=ADMIN_QUEUE_NAME,
        actor_name=REGENERATE_MATCHING_ACTOR_NAME,
        args=(task_id,),
        kwargs={},
        options={},
    )


class RedisTaskStore:
    def __init__(self, client: redis.Redis, keys: Keyspace | None = None) -> None:
        self.client = client
        self.keys = keys or Keyspace.of()

    def key(self, task_id: str) -> str:
        return self.keys.task_prefix + task_id

    def create(self, task: Task) -> None:
        match = task.filter
        fields: dict[redis.typing.FieldT, redis.typing.EncodableT] = {
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
        }
        payload = DramatiqCodec().encode(task_message(task.task_id))
        key = self.key(task.task_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping=fields)
        pipe.expire(key, TASK_TTL_S)
        pipe.lpush(self.keys.admin.queue, payload)
        pipe.execute()

    def get(self, task_id: str) -> Task | None:
        raw: dict[bytes, bytes] = self.client.hgetall(self.key(task_id))  # type: ignore[assignment]
        if not raw:
            return None
        h = {k.decode(): v.decode() for k, v in raw.items()}
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

    def started(self, task_id: str, at: datetime) -> None:
        key = self.key(task_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, "state", str(TaskState.RUNNING))
        pipe.hsetnx(key, "startedAt", _time(at))
        pipe.expire(key, TASK_TTL_S)
        pipe.execute()

    def page_done(self, task_id: str, cursor: int, regenerated: int, skipped: int) -> None:
        key = self.key(task_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, "cursor", cursor)
        pipe.hincrby(key, "pages", 1)
        pipe.hincrby(key, "regenerated", regenerated)
        pipe.hincrby(key, "skipped", skipped)
        pipe.expire(key, TASK_TTL_S)
        pipe.execute()

    def finished(self, task_id: str, state: TaskState, at: datetime, error: str | None = None) -> None:
        key = self.key(task_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping={"state": str(state), "finishedAt": _time(at), "error": error or ""})
        pipe.expire(key, TASK_TTL_S)
        pipe.execute()
