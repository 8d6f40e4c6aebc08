"""The web tier's Redis client: short timeouts and a fail-fast guard.

A hung Redis (SIGSTOPped, a stalled network) accepts connections and never answers.
Each call then waits for its socket timeout, and a request makes several calls (the
autosave seal, the queue, the event log), so short timeouts alone still cost seconds
per request. After a call times out or cannot connect, the guard fails every call at
once for `DEFAULT_COOLDOWN_S`; then a single call (the probe) may try again while the
others keep failing fast, and its outcome closes or reopens the guard. A hung Redis
therefore costs one request about one socket timeout, and the others nothing.

The failures are `redis.ConnectionError`s, so every caller already handles them: a
submission succeeds with ``enqueued: false`` (the reconciler queues its job later), the
event log falls back on the database, a save answers 503.

On a Redis Cluster each node has a guard of its own. A node that fails must not make the
others fail fast: redis-py reads the slot map again from the other nodes after every
failure, and that is how it finds the replica that took a dead master's slots over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_adapters.redis_clients import UNREACHABLE, connection_pool
from redis_adapters.redis_cluster import cluster_client, is_cluster_url

log = logging.getLogger(__name__)

#: Time allowed to open a TCP connection to Redis, in seconds.
REDIS_CONNECT_TIMEOUT_S = 1.0
#: Time allowed for one reply, in seconds: far above any command of the web tier (all O(1)
#: or a small Lua script), far below what a user waits for.
REDIS_SOCKET_TIMEOUT_S = 1.0
#: How long calls fail at once after a Redis timeout or connection failure, in seconds.
DEFAULT_COOLDOWN_S = 1.0


class RedisFailFast(redis.ConnectionError):
    """Raised instead of calling Redis while the guard is open."""


class RedisGuard:
    """A small circuit breaker shared by every connection of one client (thread-safe)."""

    def __init__(self, cooldown_s: float = DEFAULT_COOLDOWN_S, probe_timeout_s: float | None = None) -> None:
        self.cooldown_s = cooldown_s
        #: A probe that never reports (its thread died) stops blocking others after this.
        self.probe_timeout_s = (
            probe_timeout_s
            if probe_timeout_s is not None
            else REDIS_CONNECT_TIMEOUT_S + REDIS_SOCKET_TIMEOUT_S + cooldown_s
        )
        self._lock = threading.Lock()
        self._open_until: float | None = None  # None: closed (Redis answered last time)
        self._probe_since: float | None = None
        #: The thread of the probe: its own nested calls (the handshake of a new
        #: connection sends HELLO) are part of the probe, not other callers.
        self._probe_thread: int | None = None

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open_until is not None

    def before_call(self) -> None:
        """Raise `RedisFailFast` unless this call may go to Redis."""
        # Closed, the usual case: no lock (every Redis command of a request passes here). A
        # guard opened by another thread a moment ago lets this one call through: it would
        # have, had it come a moment earlier.
        if self._open_until is None:
            return
        with self._lock:
            if self._open_until is None:
                return
            now = time.monotonic()
            if now < self._open_until:
                raise RedisFailFast("Redis unavailable (failing fast after a recent timeout)")
            me = threading.get_ident()
            if self._probe_thread == me:
                return
            if self._probe_since is not None and now - self._probe_since < self.probe_timeout_s:
                raise RedisFailFast("Redis unavailable (another call is probing it)")
            self._probe_since = now
            self._probe_thread = me

    def succeeded(self) -> None:
        # Nothing to reset, the usual case: no lock (every reply passes here).
        if self._open_until is None and self._probe_since is None and self._probe_thread is None:
            return
        with self._lock:
            if self._open_until is not None:
                log.info("Redis answers again")
            self._open_until = None
            self._probe_since = None
            self._probe_thread = None

    def failed(self, error: BaseException) -> None:
        with self._lock:
            if self._open_until is None:
                log.warning("Redis call failed (%s): failing fast for %.1f s", error, self.cooldown_s)
            self._open_until = time.monotonic() + self.cooldown_s
            self._probe_since = None
            self._probe_thread = None


class NodeGuards:
    """A `RedisGuard` per server address (host, port), made on first use (thread-safe)."""

    def __init__(self, cooldown_s: float = DEFAULT_COOLDOWN_S) -> None:
        self.cooldown_s = cooldown_s
        self._lock = threading.Lock()
        self._guards: dict[tuple[str, int], RedisGuard] = {}

    def of(self, host: str, port: int) -> RedisGuard:
        with self._lock:
            guard = self._guards.get((host, port))
            if guard is None:
                guard = self._guards[(host, port)] = RedisGuard(self.cooldown_s)
            return guard


def _guarded_connection_class(base: type[Any], guard_of: Callable[[Any], RedisGuard]) -> type[Any]:
    """A subclass of the pool's connection class (TCP, TLS or unix) that reports to its guard,
    `guard_of(connection)`."""

    class GuardedConnection(base):  # type: ignore[misc]  # base is the pool's class, known at run time
        def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
            if self._sock:  # already connected: nothing goes to the network
                return super().connect_check_health(*args, **kwargs)
            guard = guard_of(self)
            guard.before_call()
            try:
                return super().connect_check_health(*args, **kwargs)
            except UNREACHABLE as exc:
                guard.failed(exc)
                raise

        def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
            guard = guard_of(self)
            guard.before_call()
            try:
                return super().send_packed_command(*args, **kwargs)
            except RedisFailFast:
                raise
            except UNREACHABLE as exc:
                guard.failed(exc)
                raise

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            guard = guard_of(self)
            try:
                response = super().read_response(*args, **kwargs)
            except UNREACHABLE as exc:
                guard.failed(exc)
                raise
            guard.succeeded()
            return response

    GuardedConnection.__name__ = GuardedConnection.__qualname__ = f"Guarded{base.__name__}"
    return GuardedConnection


def guarded_redis(
    url: str,
    *,
    guard: RedisGuard | None = None,
    connect_timeout_s: float = REDIS_CONNECT_TIMEOUT_S,
    socket_timeout_s: float = REDIS_SOCKET_TIMEOUT_S,
) -> redis.Redis:
    """A client for `url` whose every connection has short timeouts and reports to `guard`
    (on a cluster: to the guard of its node, see `NodeGuards`).

    No retries: redis-py's default (three, with backoff) multiplies the wait on a hung
    server; whoever calls decides what a failure means.
    """
    if is_cluster_url(url):
        # A guard per node: a node that hangs fails its own requests fast, as a single
        # server would, while the client reads the slot map from the others and follows
        # MOVED redirections and a failover.
        nodes = NodeGuards()
        return cluster_client(
            url,
            connection_class=_guarded_connection_class(redis.Connection, lambda c: nodes.of(c.host, c.port)),
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
    pool = connection_pool(  # a redis+sentinel:// URL too: the guard wraps the Sentinel-managed class
        url,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=socket_timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
    # One guard: a single server, or the one master a Sentinel-managed pool connects to.
    shared = guard or RedisGuard()
    pool.connection_class = _guarded_connection_class(pool.connection_class, lambda _: shared)
    return redis.Redis(connection_pool=pool)
