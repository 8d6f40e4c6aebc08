"""The broker's Lua scripts: every step that moves a message is one atomic Redis call.

One file per script in `lua/` (package data). A script whose first line is
`-- uses: _now _index` is loaded with those prologues (`lua/_now.lua`, ...) in front.

Layout of a queue `Q` (e.g. `report:queue`):
- `Q`                 list, producers LPUSH, consumers take from the right (FIFO);
- `Q:processing:<id>` list per consumer, newest on the left; a message stays here from
                      the moment it is taken until its outcome is recorded;
- `Q:delayed`         sorted set of `<16 hex>|<payload>` scored by due time in ms
                      (the prefix keeps equal payloads apart);
- `Q:dead`, `Q:invalid` lists; `Q:invalid:meta` hash digest of a quarantined payload ->
                      JSON {"at": ms, "reason"} (quarantine.lua); `Q:crashed` hash
                      payload -> deliveries lost to dead workers;
- `Q:started:<id>`    hash per consumer, payload -> its deliveries held there that began to
                      run (start.lua, written before the actor's code): the reaper counts a
                      lost delivery for these only; a message merely prefetched beside a
                      poison pill goes back uncounted. Dropped with the outcome, by the
                      release and by the reaper;
- `broker:heartbeats` sorted set of processing lists scored by last heartbeat in ms
                      (hash-tagged layout: `Q:heartbeats`, one per queue, see keys.py);
- `Q:jobs`            hash job key -> number of jobs alive for it (queued, in flight or
                      delayed), or `dead` (see below). Kept only for a queue whose codec
                      names a job key field (the top-level JSON member holding a positive
                      integer, read by `job_key` in lua/_index.lua; '' means no index).
                      Every script that creates, takes or ends a job updates it in the
                      same atomic step, so "is a job alive for key 42?" is one HGET, and a
                      Redis that lost its data lost the index with the jobs. A dead letter
                      whose follow-up (e.g. a record's status) could not be confirmed
                      leaves `dead` behind once no other job is alive for the key, for a
                      reconciler to finish.
- `Q:counted`         hash `=<payload>` -> copies of it waiting in `Q` that `Q:jobs`
                      already counts, and `n` -> their sum. Any producer may LPUSH to `Q`
                      (the .NET one, redis-cli), and the payload cannot say who did: a copy
                      the fetch takes without credit is counted then, so every job in
                      flight or delayed is counted, whoever queued it. Jobs of another
                      producer still waiting are `LLEN Q - n`; `jobs_alive.lua` counts them
                      (reading the queue) when a dead letter asks whether it was the last.
                      A queue filled before the credits existed is credited whole by the
                      first script that finds no `n` (`ensure_counted` in _index.lua).

Every script declares every key it touches (KEYS), none is built inside Lua, and each
touches the keys of one queue only: with hash-tagged keys (keys.py) every call runs on
one Redis Cluster slot.

All times come from the Redis server's clock (TIME), so workers on different hosts agree.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

#: Length of the unique prefix of a delayed member, "0123456789abcdef|" (promote.lua
#: strips it with `string.sub(m, 18)`).
DELAYED_PREFIX_LEN = 17

#: Value of a job key in `Q:jobs` after a dead letter whose follow-up was not confirmed
#: (written as the literal 'dead' in _index.lua and clear_dead_marks.lua).
DEAD_MARK = "dead"

_USES = "-- uses:"


@functools.cache
def _file(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def script_names() -> list[str]:
    """Every script of the package (its prologues, `_*.lua`, aside), sorted."""
    folder = resources.files(__package__).joinpath("lua")
    return sorted(
        p.name.removesuffix(".lua")
        for p in folder.iterdir()
        if p.name.endswith(".lua") and not p.name.startswith("_")
    )


@functools.cache
def source(name: str) -> str:
    """The full text of script `name` (e.g. "fetch"), its prologues in front."""
    body = _file(name)
    first = body.split("\n", 1)[0]
    prologues = first[len(_USES) :].split() if first.startswith(_USES) else []
    return "".join(_file(p) for p in prologues) + body


@dataclass(frozen=True)
class Scripts:
    """The scripts registered on one client (EVALSHA, loaded on first use)."""

    fetch: Script
    settle: Script
    requeue: Script
    release: Script
    promote: Script
    delay: Script
    heartbeat: Script
    silent: Script
    reap: Script
    start: Script
    figures: Script
    enqueue: Script
    enqueue_missing: Script
    clear_dead_marks: Script
    quarantine: Script

    @classmethod
    def register(cls, client: redis.Redis) -> Scripts:
        return cls(**{name: client.register_script(source(name)) for name in cls.__dataclass_fields__})
