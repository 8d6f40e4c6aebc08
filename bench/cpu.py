"""CPU seconds of the processes a benchmark measures: a process tree (a worker and its
children), the PostgreSQL backends serving a database, a Redis server, the whole machine."""

from __future__ import annotations

import psutil  # type: ignore[import-untyped]
import redis
from sqlalchemy import Engine, text


def backend_cpu(engine: Engine) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving this database, ours excepted."""
    with engine.connect() as conn:
        pids = conn.scalars(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        ).all()
    return {int(pid): cpu for pid in pids if (cpu := _cpu(int(pid))) is not None}


def _cpu(pid: int) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return float(times.user + times.system)


def tree_cpu(pid: int) -> float:
    """CPU seconds so far of a process and all its descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        total += _cpu(proc.pid) or 0.0
    return total


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """Backends that appeared during the run count from zero."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def redis_cpu(client: redis.Redis) -> float:
    """CPU seconds so far of the Redis server (`INFO cpu`: its main thread and the others);
    attributable to one benchmark only on a server of its own (stores.private_redis)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores. Idle, iowait and
    steal (the hypervisor's) are not busy; guest time is already inside user time."""
    t = psutil.cpu_times()
    busy = float(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))
    waiting = float(t.idle + getattr(t, "iowait", 0.0) + getattr(t, "steal", 0.0))
    return busy, busy + waiting
