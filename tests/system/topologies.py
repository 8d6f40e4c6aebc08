"""The servers of each topology docs/development.md names, and the moments their logs record.

Each topology is the environment `make run` is given (REDIS_URL, DATABASE_URL and what
goes with them) and, for the two that fail over, the server to kill and the log line
that says when a replica took over:

- embedded: no URL at all; `make run` starts its own Redis and PostgreSQL;
- external: the test servers (the PostgreSQL and Redis db index `make test` gives us);
- PgBouncer in transaction mode in front of the test PostgreSQL (tests/support/pgbouncer.py);
- Redis Sentinel: a master, a replica, three Sentinels (scripts/sentinel_group.py);
- Redis Cluster, three masters with a replica each (scripts/cluster.py).

Times in the servers' logs are read as the wall clock of this host (they run here), so
they compare with `time.time()` and with the timestamps the product records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

#: Settings the system tests give every stack, all documented in docs/configuration.md. They shorten
#: what would otherwise make a test wait for minutes, and change nothing else:
SYSTEM_SETTINGS = {
    # a record whose job a failover lost is queued again within seconds, not 40 s;
    "RECONCILE_GRACE_MS": "5000",
    "RECONCILE_INTERVAL_MS": "1000",
    # the hot path's retention runs every few seconds, so a test sees it run on its Redis;
    "HOTPATH_RETENTION_INTERVAL_MS": "2000",
    # the stop at the end waits for jobs in flight this long at most (stopping is tested in e2e).
    "MI_STOP_TIMEOUT_S": "15",
}

#: What the user's shell may hold that would point `make run` elsewhere than the topology.
_CLEARED = frozenset(
    {
        "DATABASE_URL",
        "REDIS_URL",
        "REDIS_HASH_TAGS",
        "DB_TRANSACTION_POOLING",
        "SECRET_KEY",
        "ADMIN_TOKENS",
        "PORT",
        "PROMETHEUS_MULTIPROC_DIR",
    }
)


def stack_env(topology: dict[str, str]) -> dict[str, str]:
    """The environment of a `make run` on `topology`: this process's, without anything that
    chooses servers or credentials, plus the system settings and the topology's URLs."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _CLEARED and not k.startswith(("HOTPATH_", "RECONCILE_", "WORKER_", "WEB_", "BROKER_"))
    }
    env.update(SYSTEM_SETTINGS)
    # No PORT: make run binds 8000, else a free port, itself, and says which in stack.json.
    env.update(topology)
    return env


# -- moments in the servers' logs ----------------------------------------------------------

#: A redis-server or redis-sentinel log line: "PID:ROLE 02 Jan 2026 15:04:05.123 * text".
_REDIS_LINE = re.compile(r"^\d+:[A-Z] (\d{1,2} \w{3} \d{4} \d\d:\d\d:\d\d\.\d{3}) [.\-*#] (.*)$")


def redis_log(path: Path) -> list[tuple[float, str]]:
    """A Redis log's lines as (wall-clock time, text)."""
    lines = []
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        match = _REDIS_LINE.match(line)
        if match:
            when = datetime.strptime(match.group(1), "%d %b %Y %H:%M:%S.%f").timestamp()
            lines.append((when, match.group(2)))
    return lines


def first_after(logs: Iterable[Path], pattern: str, since: float) -> float | None:
    """The earliest time at or after `since` a line matching `pattern` was logged in any of `logs`."""
    found = re.compile(pattern)
    times = [when for path in logs for when, text in redis_log(path) if when >= since and found.search(text)]
    return min(times) if times else None


#: Sentinel's announcement of a completed failover: every client must now use the new master.
SWITCH_MASTER = r"\+switch-master "
#: A cluster replica's own record of the end of its takeover.
CLUSTER_TAKEOVER = r"configEpoch set to \d+ after successful failover"
