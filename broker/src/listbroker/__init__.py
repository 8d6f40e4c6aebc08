"""A reliable Dramatiq broker on plain Redis lists, as a library.

It imports only the standard library, `dramatiq` and `redis`, and importing it builds
nothing: an application builds a `RedisListBroker` and sets it with `dramatiq.set_broker`.

- `RedisListBroker` (broker.py): queue `q` is the list `q:queue` (`{q}:queue` with
  `hash_tags=True`, for Redis Cluster: keys.py); reliable fetch into
  per-consumer processing lists (consumer.py); heartbeats, the reaper and the release of
  delayed messages in one housekeeping thread per process (maintenance.py); hot-path
  connections (connections.py); one Lua file per atomic step (lua/, scripts.py).
- `Codec` / `DramatiqCodec` (codecs.py): a queue's wire format; a codec raises
  `InvalidMessage` (errors.py) for a payload it cannot read, which is then quarantined.
- `ExactRetries` (retries.py): the actor option `retry_delays` gives an exact retry
  schedule, then a dead letter and the `on_dead_letter` hook.
- `AvailabilityGate` and `DependencyUnavailable` (gate.py, errors.py): hold messages
  while a dependency is down rather than spend attempts on it.
- `Batches` (batches.py): the actor options `batch_size` and `batch_fn` hand up to N
  messages of an actor (`ListMessageProxy`, in a `ListBatchProxy`: consumer.py) to one call,
  each message keeping its own outcome; middleware sees each message on its own, never the
  batch (the broker's `emit_before` / `emit_after`: batchhooks.py).
- `RequeueOnShutdown`, `ShutdownDeadline` (shutdown.py: a worker process's shutdown bounded
  once its jobs are done), `debounce_worker_sigterm` (signals.py): graceful shutdown under
  Procfile runners; `default_middleware()` (middleware.py): Dramatiq's
  defaults with ExactRetries, CurrentMessage and RequeueOnShutdown.
- `queue_figures` (figures.py), `JobIndex` (jobindex.py), `DeadLetters`
  (deadletters.py) and `DelayedMessages` (delayed.py): what producers, operators and
  reconcilers need, on any Redis client, without a broker; a dead letter carries its
  last error, attempts and time; a delayed message can be released now or removed.
- `actor_spec` / `ActorSpec` (spec.py): an actor declared on a broker only when an
  entry module says so, never at import.
- `Backoff` (backoff.py): how every long-running loop of the project waits and logs
  while a step keeps failing (capped exponential backoff; the failure once, a summary,
  the recovery).
"""

from __future__ import annotations

from listbroker.backoff import Backoff
from listbroker.batches import BATCH_ACTOR_SUFFIX, BATCH_FN_OPTION, BATCH_SIZE_OPTION, Batches
from listbroker.broker import (
    DEFAULT_DELAY_POLL_MS,
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    DEFAULT_SOCKET_TIMEOUT,
    RedisListBroker,
)
from listbroker.codecs import Codec, DramatiqCodec, job_key_field
from listbroker.consumer import ListBatchProxy, ListMessageProxy
from listbroker.deadletters import DEAD_LETTER_OPTION, DeadLetters, Quarantine
from listbroker.delayed import DelayedEntry, DelayedMessages, Removed
from listbroker.errors import BrokerError, DependencyUnavailable, InvalidMessage
from listbroker.figures import QueueFigures, queue_figures
from listbroker.gate import DEFAULT_MAX_BACKOFF_S, DEFAULT_MIN_BACKOFF_S, AvailabilityGate, Probe
from listbroker.jobindex import JobIndex
from listbroker.keys import QueueKeys
from listbroker.middleware import default_middleware
from listbroker.retries import (
    DEFAULT_MAX_LOST_DELIVERIES,
    LOST_DELIVERIES_OPTION,
    DeadLetterHook,
    ExactRetries,
)
from listbroker.shutdown import RequeueOnShutdown, ShutdownDeadline
from listbroker.signals import debounce_worker_sigterm
from listbroker.spec import ActorSpec, actor_spec

#: What a Dramatiq application uses: the broker and its options, its middleware, the proxies a
#: batch function receives, codecs, errors, and the readers of a queue's state. Everything else
#: (the consumer, the connections, the scripts, the key layout's constants) is the library's
#: own, importable by its module path for tests and tools, and may change in any version.
__all__ = [
    "BATCH_ACTOR_SUFFIX",
    "BATCH_FN_OPTION",
    "BATCH_SIZE_OPTION",
    "DEAD_LETTER_OPTION",
    "DEFAULT_DELAY_POLL_MS",
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_HEARTBEAT_TIMEOUT_MS",
    "DEFAULT_MAX_BACKOFF_S",
    "DEFAULT_MAX_LOST_DELIVERIES",
    "DEFAULT_MIN_BACKOFF_S",
    "DEFAULT_SOCKET_TIMEOUT",
    "LOST_DELIVERIES_OPTION",
    "ActorSpec",
    "AvailabilityGate",
    "Backoff",
    "Batches",
    "BrokerError",
    "Codec",
    "DeadLetterHook",
    "DeadLetters",
    "DelayedEntry",
    "DelayedMessages",
    "DependencyUnavailable",
    "DramatiqCodec",
    "ExactRetries",
    "InvalidMessage",
    "JobIndex",
    "ListBatchProxy",
    "ListMessageProxy",
    "Probe",
    "Quarantine",
    "QueueFigures",
    "QueueKeys",
    "RedisListBroker",
    "Removed",
    "RequeueOnShutdown",
    "ShutdownDeadline",
    "actor_spec",
    "debounce_worker_sigterm",
    "default_middleware",
    "job_key_field",
    "queue_figures",
]
