"""A poison pill beside innocent jobs, in real worker processes: the app and its driver.

As an app (`python -m dramatiq poison_app --processes 1 --threads 1`, this folder on the
path, POISON_REDIS_URL naming a Redis db of its own): two actors on a `RedisListBroker` with
the default middleware (ExactRetries, RequeueOnShutdown) and a short heartbeat timeout.
`suicide(n)` SIGKILLs its own worker process; `ok(n)` records that it ran.

As a script (`python poison_app.py --redis-url redis://127.0.0.1:6479/0`, with the
interpreter of a virtualenv holding the broker): deletes that db's `poison*` keys, queues one `suicide(1)`
then `ok(0)`, `ok(1)`, `ok(2)`, starts the worker again each time it dies, and prints which
jobs ran and what the dead-letter list holds. The broker's suite runs it
(test_poison.py); scripts/poison_repro.py runs it in a virtualenv holding only the broker.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import redis
from listbroker import RedisListBroker, default_middleware

QUEUE = "poison"
#: Where `ok` writes the n of each run, and `suicide` each start.
RAN_KEY = "poison:ran"
STARTED_KEY = "poison:suicide-started"
HEARTBEAT_TIMEOUT_MS = 1_000
HEARTBEAT_INTERVAL_MS = 200
#: The most a run may take (start, work, the reaper's wait for the dead consumer) before the
#: driver gives up on it.
RUN_LIMIT_S = 30.0


@functools.cache
def client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["POISON_REDIS_URL"])


if os.environ.get("POISON_REDIS_URL"):
    dramatiq.set_broker(
        RedisListBroker(
            url=os.environ["POISON_REDIS_URL"],
            middleware=default_middleware(),
            heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
    )

    @dramatiq.actor(queue_name=QUEUE, retry_delays=(100, 100, 100))
    def suicide(n: int) -> None:
        client().rpush(STARTED_KEY, n)
        os.kill(os.getpid(), signal.SIGKILL)

    @dramatiq.actor(queue_name=QUEUE, retry_delays=(100, 100, 100))
    def ok(n: int) -> None:
        client().rpush(RAN_KEY, n)


@dataclass
class Outcome:
    #: Each run's worker exit code (-9 or 1: killed; 0: stopped once every job was settled).
    runs: list[int] = field(default_factory=list)
    ran: list[int] = field(default_factory=list)
    suicide_starts: int = 0
    #: The jobs that ever had a lost delivery counted (read after each run).
    charged: set[str] = field(default_factory=set)
    #: Per dead letter: (actor, args, its `dead_letter` option's error).
    dead: list[tuple[str, list[object], str]] = field(default_factory=list)


def settled(db: redis.Redis, innocents: int) -> bool:
    """Every job settled: no job queued or held, every innocent ran, the poison dead-lettered."""
    held = any(db.scan_iter(match=f"{QUEUE}:queue:processing:*", count=1000))
    return (
        not held
        and db.llen(f"{QUEUE}:queue") == 0
        and db.llen(f"{QUEUE}:queue:dead") >= 1
        and db.llen(RAN_KEY) >= innocents
    )


def run_restarts(python: str, redis_url: str, *, max_runs: int = 8, innocents: int = 3) -> Outcome:
    """Queue the jobs, then start `dramatiq poison_app` again each time it stops, until every
    job is settled (then stop it with SIGTERM) or `max_runs` workers were started."""
    db = redis.Redis.from_url(redis_url)
    for key in db.scan_iter(match="poison*", count=1000):
        db.delete(key)
    env = {**os.environ, "POISON_REDIS_URL": redis_url}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")])
    sender = RedisListBroker(url=redis_url)
    sender.declare_queue(QUEUE)
    messages: list[dramatiq.Message[Any]] = [
        dramatiq.Message(queue_name=QUEUE, actor_name="suicide", args=(1,), kwargs={}, options={})
    ]
    messages += [
        dramatiq.Message(queue_name=QUEUE, actor_name="ok", args=(i,), kwargs={}, options={})
        for i in range(innocents)
    ]
    for message in messages:
        sender.enqueue(message)
    sender.close()
    outcome = Outcome()
    for _ in range(max_runs):
        worker = subprocess.Popen(
            [python, "-m", "dramatiq", "poison_app", "--processes", "1", "--threads", "1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its worker process is killed with it, should it hang
        )
        deadline = time.monotonic() + RUN_LIMIT_S
        try:
            while worker.poll() is None and time.monotonic() < deadline:
                if settled(db, innocents):
                    worker.send_signal(signal.SIGTERM)
                    worker.wait(30)
                    break
                time.sleep(0.1)
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        outcome.runs.append(int(worker.returncode))
        for payload in db.hkeys(f"{QUEUE}:queue:crashed"):
            body = json.loads(payload)
            outcome.charged.add(f"{body['actor_name']}{tuple(body['args'])}")
        if settled(db, innocents):
            break
    outcome.ran = sorted(int(n) for n in db.lrange(RAN_KEY, 0, -1))
    outcome.suicide_starts = int(db.llen(STARTED_KEY))
    for entry in db.lrange(f"{QUEUE}:queue:dead", 0, -1):
        body = json.loads(entry)
        option = body.get("options", {}).get("dead_letter") or {}
        outcome.dead.append((body["actor_name"], body["args"], str(option.get("error", ""))))
    for key in db.scan_iter(match="poison*", count=1000):
        db.delete(key)
    db.close()
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--redis-url", required=True, help="a Redis db of its own (its poison* keys are deleted)"
    )
    parser.add_argument("--max-runs", type=int, default=8)
    args = parser.parse_args()
    outcome = run_restarts(sys.executable, args.redis_url, max_runs=args.max_runs)
    print(f"worker runs: {len(outcome.runs)}, exit codes {outcome.runs}")
    print(f"suicide(1) started {outcome.suicide_starts} times")
    print(f"ok jobs that ran: {outcome.ran}")
    print(f"jobs charged a lost delivery: {sorted(outcome.charged)}")
    print(f"dead letters: {len(outcome.dead)}")
    for actor, args_, error in outcome.dead:
        print(f"  {actor}{tuple(args_)}: {error}")


if __name__ == "__main__":
    main()
