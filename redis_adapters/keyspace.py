"""Redis keys and lifetimes of the hot path: shared by its adapters (autosave store, event
sink) and its loops (hotpath/).

Redis keys (all strings are the defaults; the key classes take a prefix for benchmarks;
`Keyspace` gives every family in the layout REDIS_HASH_TAGS chooses, `{hotpath}:...` and
`{eventlog}:...` when hash-tagged, so each family lives in one Redis Cluster slot):

| key | type | what |
|---|---|---|
| `hotpath:record:<id>` | hash | cached owner (`user`) and `status` of a record (saves skip the DB) |
| `hotpath:answers:<id>` | hash | autosaved answers: question id -> `"<value>:<saved ms>"` |
| `hotpath:answers:dirty` | set | record ids whose autosave has not been flushed |
| `hotpath:answers:syncing` | set | the ids the answer flusher is persisting right now |
| `hotpath:answers:lock` | string | the answer flusher's lock (SET NX PX, value: owner token) |
| `hotpath:answers:invalid` | list | fields set aside: `<record id>:<field length>:<field><value>` |
| `hotpath:progress:<id>` | hash | progress: `q` current question, `n` answered, `a` last activity |
|  |  | ms, `t` LastUpdateTime ms |
| `hotpath:progress:dirty`, `:syncing`, `:lock`, `:invalid` | set, set, string, list | as for answers |
| `hotpath:settings` | hash | run-time settings of the loops (see hotpath/runtime_settings.py) |
| `eventlog:queue` | list | events (JSON), LPUSHed by producers, consumed from the right |
| `eventlog:backup` | list | the batch the consumer is inserting (replayed after a crash) |
| `eventlog:invalid` | list | entries that could not be decoded, kept verbatim |
| `eventlog:lock` | string | the event-log consumer's lock |
| `hotpath:retention:lock` | string | the retention loop's lock (hotpath/retention_loop.py) |
| `admin:queue` | list | the admin tasks' Dramatiq queue (`{admin}:queue` when hash-tagged) |
| `admin:task:<id>` | hash | an admin task's progress (redis_adapters/task_store.py), kept 7 days |
| `admin:tasks:active` | sorted set | tasks queued or running, by last change (ms): their cap |
| `admin:tasks:filter:<digest>` | string | the one task queued or running for a filter |
| `console:session:<digest>` | hash | a console session (web/console/sessions.py), expiring with it |
| `console:signin:address:<addr>` | hash | sign-in attempts of an address, its wait (web/console/limits.py) |
| `console:signin:credential:<fp>` | hash | sign-in attempts of browsers with its device cookie |
| `report:queue:reconciler`, `…:lock` | hash, string | the reconciler's figures and lease (reconciler/) |
| `processes:beats` | hash | the process registry (observability/liveness.py) |
| `throughput:<minute>`, `…:hour:<hour>`, `…:total` | hash | jobs per minute, hour, in all (observability/) |
| `drill:records` | hash | the fault drill (drill_store.py): record id -> end of its drill (ms) |
"""

from __future__ import annotations

from dataclasses import dataclass

from listbroker.keys import QueueKeys

from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_NAME

#: Prefix of every hot-path key but the event log's.
HOTPATH_PREFIX = "hotpath:"

#: An autosave (answers and progress hashes) lives this long after the last save, so an
#: abandoned assessment does not stay in Redis for ever. Far longer than any flush delay.
AUTOSAVE_TTL_S = 7 * 24 * 3600

#: The cached owner and status of a record live this long after they were cached.
RECORD_CACHE_TTL_S = 24 * 3600

#: A seal (submission in progress) outlives any submission; if the submitting process
#: dies before releasing it, saves resume (after a DB check) once it expires.
SEAL_TTL_S = 300


@dataclass(frozen=True)
class DirtyKeys:
    """The keys of one dirty-set flow (answers or progress)."""

    #: `<prefix><name>:<record id>`: the per-record hash.
    item_prefix: str
    dirty: str
    syncing: str
    lock: str
    #: Fields that could not be decoded or stored, kept verbatim (dirty.invalid_entry).
    invalid: str

    @classmethod
    def named(cls, name: str, prefix: str = HOTPATH_PREFIX) -> DirtyKeys:
        base = f"{prefix}{name}:"
        return cls(
            item_prefix=base,
            dirty=base + "dirty",
            syncing=base + "syncing",
            lock=base + "lock",
            invalid=base + "invalid",
        )

    def item(self, record_id: int) -> str:
        return f"{self.item_prefix}{record_id}"


@dataclass(frozen=True)
class AutosaveKeys:
    answers: DirtyKeys
    progress: DirtyKeys
    record_prefix: str

    @classmethod
    def default(cls, prefix: str = HOTPATH_PREFIX) -> AutosaveKeys:
        return cls(
            answers=DirtyKeys.named("answers", prefix),
            progress=DirtyKeys.named("progress", prefix),
            record_prefix=f"{prefix}record:",
        )

    def record(self, record_id: int) -> str:
        return f"{self.record_prefix}{record_id}"


@dataclass(frozen=True)
class EventLogKeys:
    queue: str = "eventlog:queue"
    backup: str = "eventlog:backup"
    invalid: str = "eventlog:invalid"
    lock: str = "eventlog:lock"

    @classmethod
    def with_prefix(cls, prefix: str) -> EventLogKeys:
        return cls(*(f"{prefix}{name}" for name in ("queue", "backup", "invalid", "lock")))


#: The retention loop's lease (event-log partitions, purges, trimming of the invalid lists).
RETENTION_LOCK_KEY = f"{HOTPATH_PREFIX}retention:lock"

#: The hot path's run-time settings hash in the default layout (`Keyspace.hotpath_settings`).
HOTPATH_SETTINGS_KEY = f"{HOTPATH_PREFIX}settings"

# Keys of one name in either layout: each is used alone (no script or MULTI spans it and
# another key), so it needs no hash tag on a Redis Cluster.
#: The reconciler's lease and its figures (last pass, totals): reconciler/loop.py.
RECONCILER_LOCK_KEY = "report:queue:reconciler:lock"
RECONCILER_STATS_KEY = "report:queue:reconciler"
#: The process registry (observability/liveness.py).
PROCESS_BEATS_KEY = "processes:beats"
#: Jobs per minute, per hour and in all (observability/throughput.py).
THROUGHPUT_MINUTE_PREFIX = "throughput:"
THROUGHPUT_HOUR_PREFIX = "throughput:hour:"
THROUGHPUT_TOTAL_KEY = "throughput:total"


def family_prefix(family: str, *, hash_tag: bool = False) -> str:
    """`family:`, or `{family}:` when hash-tagged: every key of the family then shares one
    Redis Cluster slot, so each of its Lua scripts and MULTI blocks runs on one node."""
    return f"{{{family}}}:" if hash_tag else f"{family}:"


@dataclass(frozen=True)
class ConsoleKeys:
    """The admin console's keys: sessions and the sign-in limit (one family, `console:`)."""

    session_prefix: str
    signin_address_prefix: str
    #: The wrong sign-in tokens of every address, for the console's alarm (a hash).
    signin_guessing: str

    @classmethod
    def with_prefix(cls, prefix: str) -> ConsoleKeys:
        return cls(
            session_prefix=f"{prefix}session:",
            signin_address_prefix=f"{prefix}signin:address:",
            signin_guessing=f"{prefix}signin:guessing",
        )

    def session(self, digest: str) -> str:
        return self.session_prefix + digest

    def signin_address(self, address: str) -> str:
        return self.signin_address_prefix + address


@dataclass(frozen=True)
class Keyspace:
    """Every Redis key family of the pipeline, in the layout of REDIS_HASH_TAGS.

    Default: today's names (`report:queue`, `hotpath:answers:dirty`, `eventlog:queue`);
    hash-tagged: `{report}:queue`, `{hotpath}:answers:dirty`, `{eventlog}:queue`, one tag
    per family whose keys a script or a transaction uses together. A new key goes into
    one of these families (or a new one built with `family_prefix`), never spelled out.
    """

    hash_tags: bool
    #: The report queue's broker keys (broker/src/listbroker/keys.py).
    report: QueueKeys
    autosave: AutosaveKeys
    eventlog: EventLogKeys
    #: The hot-path loops' run-time settings hash (hotpath/runtime_settings.py).
    hotpath_settings: str
    #: The admin tasks' queue and the prefix of their progress hashes: one family, so a
    #: task and its message are written in one MULTI (redis_adapters/task_store.py).
    admin: QueueKeys
    task_prefix: str
    #: Tasks queued or running (sorted set) and the prefix of the one-task-per-filter keys:
    #: the `admin` family too, so a task's creation checks and writes them in one script.
    tasks_active: str
    task_filter_prefix: str
    #: The console's sessions and sign-in limit.
    console: ConsoleKeys
    #: The fault drill's hash (services/usecases/drill.py): a key of its own, read alone.
    drill: str

    @classmethod
    def of(cls, hash_tags: bool = False) -> Keyspace:
        hotpath = family_prefix("hotpath", hash_tag=hash_tags)
        admin = family_prefix(ADMIN_QUEUE_NAME, hash_tag=hash_tags)
        return cls(
            hash_tags=hash_tags,
            report=QueueKeys.for_queue(REPORT_QUEUE_NAME, hash_tag=hash_tags),
            autosave=AutosaveKeys.default(hotpath),
            eventlog=EventLogKeys.with_prefix(family_prefix("eventlog", hash_tag=hash_tags)),
            hotpath_settings=hotpath + "settings",
            admin=QueueKeys.for_queue(ADMIN_QUEUE_NAME, hash_tag=hash_tags),
            task_prefix=admin + "task:",
            tasks_active=admin + "tasks:active",
            task_filter_prefix=admin + "tasks:filter:",
            console=ConsoleKeys.with_prefix(family_prefix("console", hash_tag=hash_tags)),
            drill=family_prefix("drill", hash_tag=hash_tags) + "records",
        )
