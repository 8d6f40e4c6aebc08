"""The pipeline at a glance, for the console's overview and its alarm banner: every queue's
figures and the wait of its oldest job, the processes, and what needs a human now.

An alarm is raised when no worker or no hotpath process is alive (reports stop being
made, or answers and events stop reaching PostgreSQL: the same rule as
`/healthz/workers`'s 503), or when a queue's oldest job has waited past the threshold
(ALARM_OLDEST_JOB_S, config/settings.py: workers alive but not keeping up, or stuck).
Reading costs a few bounded Redis calls whatever the queues' length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from listbroker import QueueFigures, QueueKeys, queue_figures

from observability.liveness import REQUIRED_KINDS, ProcessBeat, live_processes
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_peek import oldest_waiting_age_s
from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_NAME


@dataclass(frozen=True)
class QueueState:
    name: str
    figures: QueueFigures
    #: Seconds the oldest waiting job has waited (None: none waits, or its time is unreadable).
    oldest_age_s: float | None


@dataclass(frozen=True)
class Alarm:
    #: "no_worker", "no_hotpath" or "queue_wait"
    kind: str
    #: What is wrong and what to do, in Chinese (the console's words).
    message: str


@dataclass(frozen=True)
class PipelineHealth:
    queues: list[QueueState]
    processes: list[ProcessBeat]
    alarms: list[Alarm]

    def queue(self, name: str) -> QueueState:
        return next(q for q in self.queues if q.name == name)


_KIND_WORDS = {"worker": "报告生成 worker", "hotpath": "热路径 hotpath"}
_KIND_EFFECT = {
    "worker": "报告不会生成，提交的记录会一直停在“生成中”",
    "hotpath": "自动保存的作答、进度和事件日志不会写入数据库",
}
_QUEUE_WORDS = {REPORT_QUEUE_NAME: "报告生成队列", ADMIN_QUEUE_NAME: "后台任务队列"}


def start_advice(kind: str) -> str:
    """How to start a process of `kind` again, as printed by `make run` and the README: the
    commands work as written in a fresh shell in the checkout (scripts/stack_ctl.py)."""
    return (
        f"启动它：make run 下在仓库目录运行 make start PROCESS={kind}（make status 列出全部进程）；"
        f"systemd 部署下运行 systemctl start mi-assessment@{kind}。"
    )


def alarms(processes: list[ProcessBeat], queues: list[QueueState], *, oldest_job_s: float) -> list[Alarm]:
    """What needs a human now (pure: the figures in, the alarms out)."""
    found = []
    for kind in REQUIRED_KINDS:
        if not any(p.kind == kind and p.alive for p in processes):
            found.append(
                Alarm(
                    f"no_{kind}",
                    f"没有存活的{_KIND_WORDS[kind]}进程：{_KIND_EFFECT[kind]}。{start_advice(kind)}",
                )
            )
    for queue in queues:
        if queue.oldest_age_s is not None and queue.oldest_age_s > oldest_job_s:
            words = _QUEUE_WORDS.get(queue.name, queue.name)
            found.append(
                Alarm(
                    "queue_wait",
                    f"{words}最久的任务已等待 {int(queue.oldest_age_s)} 秒（超过 {int(oldest_job_s)} 秒），"
                    f"排队 {queue.figures.queued} 个：worker 没有及时取走任务。",
                )
            )
    return found


def _oldest_dramatiq_age_s(client: redis.Redis, key: str, now: datetime) -> float | None:
    """The oldest waiting message's age on a queue of Dramatiq's own encoding (its timestamp, ms)."""
    oldest = client.lindex(key, -1)
    if oldest is None:
        return None
    try:
        stamp = float(json.loads(oldest)["message_timestamp"]) / 1000
    except (ValueError, KeyError, TypeError):
        return None
    return max(0.0, now.timestamp() - stamp)


def queue_state(
    client: redis.Redis, keys: QueueKeys, name: str, *, hash_tag: bool, now: datetime
) -> QueueState:
    figures = queue_figures(client, name, hash_tag=hash_tag)
    if name == REPORT_QUEUE_NAME:
        age = oldest_waiting_age_s(client, now=now, key=keys.queue)
    else:
        age = _oldest_dramatiq_age_s(client, keys.queue, now)
    return QueueState(name, figures, age)


def read_health(
    client: redis.Redis, keys: Keyspace, *, oldest_job_s: float, now: datetime | None = None
) -> PipelineHealth:
    """Every queue (report, admin), the processes and the alarms; Redis errors are raised."""
    now = now or datetime.now(UTC)
    queues = [
        queue_state(client, keys.report, REPORT_QUEUE_NAME, hash_tag=keys.hash_tags, now=now),
        queue_state(client, keys.admin, ADMIN_QUEUE_NAME, hash_tag=keys.hash_tags, now=now),
    ]
    processes = live_processes(client, now=now.timestamp())
    return PipelineHealth(queues, processes, alarms(processes, queues, oldest_job_s=oldest_job_s))
