"""The pipeline at a glance, for operators: every queue's figures and the wait of its oldest job
(redis_adapters/queue_figures.py), the hot path's backlog, the processes, and what needs a
human now. The console's overview and its alarm banner read `read_health`; the web's /metrics
reads the same queue states and backlog.

An alarm is raised when no worker or no hotpath process is alive (reports stop being
made, or answers and events stop reaching PostgreSQL: the same rule as
`/healthz/workers`'s 503), or when a queue's oldest job has waited past the threshold
(ALARM_OLDEST_JOB_S, config/settings.py: workers alive but not keeping up, or stuck).
Reading costs a few bounded Redis calls whatever the queues' length.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from observability.liveness import REQUIRED_KINDS, ProcessBeat, live_processes
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_figures import QueueState, queue_states
from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_NAME


@dataclass(frozen=True)
class HotpathBacklog:
    answers_dirty: int  # records whose autosaved answers are not yet in PostgreSQL
    progress_dirty: int  # records whose progress is not yet in PostgreSQL
    events_queued: int  # events waiting in eventlog:queue
    events_in_backup: int  # events the consumer is inserting (or will replay after a crash)


def hotpath_backlog(client: redis.Redis, keyspace: Keyspace) -> HotpathBacklog:
    """What the hot path has still to write to PostgreSQL (one pipelined round trip)."""
    autosave, events = keyspace.autosave, keyspace.eventlog
    pipe = client.pipeline(transaction=False)
    pipe.scard(autosave.answers.dirty)
    pipe.scard(autosave.progress.dirty)
    pipe.llen(events.queue)
    pipe.llen(events.backup)
    answers, progress, queued, backup = pipe.execute()
    return HotpathBacklog(int(answers), int(progress), int(queued), int(backup))


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


def read_health(
    client: redis.Redis, keys: Keyspace, *, oldest_job_s: float, now: datetime | None = None
) -> PipelineHealth:
    """Every queue (report, admin), the processes and the alarms; Redis errors are raised."""
    now = now or datetime.now(UTC)
    queues = queue_states(client, hash_tag=keys.hash_tags, now=now.timestamp())
    processes = live_processes(client, now=now.timestamp())
    return PipelineHealth(queues, processes, alarms(processes, queues, oldest_job_s=oldest_job_s))
