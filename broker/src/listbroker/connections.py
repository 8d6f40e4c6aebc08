"""Connection plumbing of the broker's hot paths, and Redis errors as Dramatiq's.

`connection_errors` turns redis-py's connection failures into Dramatiq's
`ConnectionClosed`: a consumer waits them out (consumer.py), Dramatiq repeats a failed ack,
a producer's `send` raises it. `run_on`,
`DirectConnections` and `ScriptChannel` send the hot-path commands (enqueue, a
consumer's fetch) without redis-py's per-call machinery. On a Redis Cluster client
(which routes each command to the node of its keys' slot) `ClusterCommands` sends them
through the client instead: `hot_path_connections` picks one.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

import redis
from dramatiq.errors import ConnectionClosed
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.connection import AbstractConnection

#: Error replies of a server that cannot serve now though the connection is fine: a master
#: cut off from its replicas (`min-replicas-to-write`), a replica without its master, a
#: script running too long, a cluster slot on the move. redis-py maps READONLY, OOM and
#: LOADING to classes of their own (UNAVAILABLE_ERRORS); these it leaves as ResponseError.
UNAVAILABLE_REPLIES = ("NOREPLICAS", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN")
#: ...and those: a master demoted to replica, one at `maxmemory`, one loading its data.
UNAVAILABLE_ERRORS: tuple[type[redis.RedisError], ...] = (
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.BusyLoadingError,
)


def unavailable(exc: redis.RedisError) -> bool:
    """Is this error reply a server that cannot serve for now (not a wrong command)?"""
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return True
    return isinstance(exc, redis.ResponseError) and str(exc).split(" ", 1)[0] in UNAVAILABLE_REPLIES


@contextmanager
def connection_errors() -> Iterator[None]:
    """Redis failures become Dramatiq's ConnectionClosed: waited out and tried again.

    So do the error replies of a server that cannot serve for now (`unavailable`): found by
    the soak on Sentinel, a consumer's fetch refused with NOREPLICAS raised a ResponseError,
    Dramatiq took it for an unexpected error, and closing the consumer raised it again and
    ended the consumer thread: the worker process lived on, taking no job.
    """
    try:
        yield
    except redis.ConnectionError as exc:
        raise ConnectionClosed(exc) from exc
    except redis.TimeoutError as exc:
        raise ConnectionClosed(exc) from exc
    except (redis.exceptions.ClusterDownError, redis.exceptions.SlotNotCoveredError) as exc:
        # A cluster in failover (no master for a slot yet) is a Redis unavailable for now.
        raise ConnectionClosed(exc) from exc
    except redis.RedisError as exc:
        if unavailable(exc):
            raise ConnectionClosed(exc) from exc
        raise


def run_on(conn: AbstractConnection, command: tuple[Any, ...], script: Script | None = None) -> Any:
    """Send one command on `conn` and read its reply, without redis-py's per-call machinery.

    A call through `redis.Redis` pays, every time, for a locked pool checkout with a
    readiness poll, a retry wrapper and metrics hooks: about half the client's cost of
    a round trip here. The broker's hot paths (a consumer's fetch, `enqueue`) use this
    with `DirectConnections` instead; everything else uses the client.

    Retry policy (the client's own `Retry`, if it has one, is not used: it would repeat
    any command, even one whose reply was lost): a command is sent again, once, on a
    fresh connection, only when *sending* it failed, so it never reached the server; a
    failure while reading the reply is raised, since the command may have run (a
    non-idempotent LPUSH or fetch must not run twice). On any failure
    other than an error reply the connection is disconnected, so a late reply can never
    be read by another call. NOSCRIPT (the server lost its script cache) loads `script`
    and runs the command again.
    """
    try:
        try:
            connected(conn)
            conn.send_command(*command)
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            connected(conn)
            conn.send_command(*command)  # the first attempt never reached Redis
        try:
            return conn.read_response()
        except redis.exceptions.NoScriptError:
            if script is None:
                raise
            source: Any = script  # types-redis lacks Script.script
            conn.send_command("SCRIPT", "LOAD", source.script)
            conn.read_response()
            conn.send_command(*command)
            return conn.read_response()
    except redis.ResponseError:
        raise  # a complete error reply: the connection is still in step
    except BaseException:
        conn.disconnect()
        raise


def connected(conn: AbstractConnection) -> None:
    """Connect `conn` by its own `connect()` unless it is connected.

    A connection used outside its pool must be: `send_command` alone opens the socket to
    the address the connection last knew, which a `SentinelManagedConnection` only learns
    in `connect()` (it asks the Sentinels for the master there). Left to `send_command`
    (redis-py 8), a new one went to localhost:6379, the default, and one whose master had
    died went back to the dead master.
    """
    if not cast(Any, conn).is_connected:
        conn.connect()


#: A connection idle for longer than this is checked for a close by the server before use.
IDLE_CHECK_SECONDS = 1.0


class ScriptCaller(Protocol):
    """Runs a consumer's fetch script, from the consumer thread and acking threads."""

    def call(self, script: Script, keys: list[str], args: list[Any]) -> Any: ...

    def send(self, script: Script, keys: list[str], args: list[Any]) -> None:
        """Run a script whose reply nobody waits for, before any later call of this channel."""

    def close(self) -> None: ...


class HotPathConnections(Protocol):
    """What the broker's hot paths send their commands through (`DirectConnections` or
    `ClusterCommands`)."""

    def run(self, *command: Any) -> Any: ...

    def run_script(self, script: Script, keys: list[str], args: list[Any]) -> Any: ...

    def channel(self) -> ScriptCaller:
        """A consumer's own way of calling its fetch script."""
        ...

    def close(self) -> None: ...


def hot_path_connections(client: redis.Redis) -> HotPathConnections:
    """`ClusterCommands` for a `RedisCluster` client, else `DirectConnections`."""
    if isinstance(client, RedisCluster):
        return ClusterCommands(client)
    return DirectConnections(client)


class ClusterCommands:
    """The hot paths on a Redis Cluster: every command through the client, which sends it
    to the node serving its keys' slot and follows MOVED/ASK redirections.

    The direct connections' shortcut needs one server; on a cluster the client's routing
    is what makes the command land on the right node, so it is worth its cost here.
    """

    def __init__(self, client: RedisCluster) -> None:
        self.client = client

    def run(self, *command: Any) -> Any:
        return self.client.execute_command(*command)

    def run_script(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        return script(keys=keys, args=args, client=self.client)

    def channel(self) -> ScriptCaller:
        return self

    def call(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        return self.run_script(script, keys, args)

    def send(self, script: Script, keys: list[str], args: list[Any]) -> None:
        self.run_script(script, keys, args)  # the client's routing waits for its reply

    def close(self) -> None:
        """Nothing of its own: the connections are the client's."""


class DirectConnections:
    """Connections of the broker's hot paths, used with `run_on` (any thread).

    Made with the client's own connection settings, but kept outside its pool: taking
    one is a deque pop rather than the pool's locked checkout. Like the pool, a
    connection that sat idle is first checked for a close by the server (a restart, an
    idle timeout), so the command goes out on a live connection, and a forked process
    never uses its parent's sockets. A pool that follows a master (it has a `follow()`, as
    a Sentinel pool may: asks which server is the master now) is asked first, and a
    connection it no longer owns (to a master since demoted) is closed, to reconnect to
    the new one: a direct connection must not keep writing to a server a failover left.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.pool = client.connection_pool
        self._idle: deque[tuple[AbstractConnection, float]] = deque()
        self._pid = os.getpid()
        self._follow = getattr(self.pool, "follow", None)

    def take(self) -> AbstractConnection:
        if self._pid != os.getpid():
            self._idle = deque()  # the parent's connections: leave them to the parent
            self._pid = os.getpid()
        try:
            conn, since = self._idle.pop()
        except IndexError:
            return cast(AbstractConnection, self.pool.connection_class(**self.pool.connection_kwargs))
        return self.refresh(conn, since)

    def refresh(self, conn: AbstractConnection, since: float) -> AbstractConnection:
        """`conn`, idle since `since`, disconnected if it must not be written to as it is (it
        reconnects on its next send): to a master since demoted, or closed by the server."""
        if self._follow is not None:
            self._follow()
            if not self.pool.owns_connection(cast(Any, conn)):
                conn.disconnect()  # to a master since demoted: the next send asks for the new one
                return conn
        if time.monotonic() - since > IDLE_CHECK_SECONDS and cast(Any, conn).is_connected:
            try:
                if conn.can_read():
                    conn.disconnect()  # unexpected bytes: never read them as a reply
            except (redis.ConnectionError, OSError):
                conn.disconnect()  # closed by the server; the next send reconnects
        return conn

    def give_back(self, conn: AbstractConnection) -> None:
        self._idle.append((conn, time.monotonic()))

    def run(self, *command: Any) -> Any:
        conn = self.take()
        try:
            return run_on(conn, command)
        finally:
            self.give_back(conn)

    def run_script(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        conn = self.take()
        try:
            return run_on(conn, evalsha_command(script, keys, args), script)
        finally:
            self.give_back(conn)

    def channel(self) -> ScriptCaller:
        return ScriptChannel(self)

    def close(self) -> None:
        while self._idle:
            conn, _ = self._idle.pop()
            conn.disconnect()


def evalsha_command(script: Script, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
    source: Any = script  # types-redis lacks Script.sha
    return ("EVALSHA", source.sha, len(keys), *keys, *args)


class ScriptChannel:
    """The connection a consumer keeps for its fetch script (see `run_on`).

    Calls are serialised by a lock: the consumer thread fetches, acking threads flush.

    `send` (worker threads: the started marks) writes a script call on a second connection
    of its own, which Redis runs without replying (`CLIENT REPLY SKIP`), and returns at once:
    waiting for a reply per message cost a no-op actor ~150 µs of CPU per message (a thread
    blocked on a socket hands the GIL around, and the fetch's lock), against ~40 µs written
    blind. Redis runs it even if this process dies the next instant: the kernel delivers a
    dead process's written bytes before its FIN, as long as nothing unread sits in its
    receive buffer (a close with unread data resets the connection instead), and nothing
    ever does on that connection; once a second it is checked as an idle connection is (closed
    by the server? to a master since demoted?). Its order against the other connection's calls is not
    guaranteed: a script sent so must hold whatever it finds (start.lua marks only a message
    still held). The script goes in full (EVAL: no reply would say NOSCRIPT). A server that
    refuses `CLIENT REPLY` (a proxy) is found on the first `send`, which then waits for the
    reply as `call` does.
    """

    def __init__(self, connections: DirectConnections) -> None:
        self.connections = connections
        self._conn: AbstractConnection | None = None
        self._lock = threading.Lock()
        #: `send`'s connection and lock.
        self._blind: AbstractConnection | None = None
        self._blind_checked = 0.0
        self._blind_lock = threading.Lock()
        #: Whether the server skips replies on request (None: not asked yet).
        self._skips: bool | None = None

    def _connection(self) -> AbstractConnection:
        if self._conn is None:
            self._conn = self.connections.take()
        return self._conn

    def call(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        with self._lock:
            return run_on(self._connection(), evalsha_command(script, keys, args), script)

    def send(self, script: Script, keys: list[str], args: list[Any]) -> None:
        source: Any = script  # types-redis lacks Script.script
        command = ("EVAL", source.script, len(keys), *keys, *args)
        with self._blind_lock:
            now = time.monotonic()
            if self._blind is None:
                self._blind, self._blind_checked = self.connections.take(), now
            elif now - self._blind_checked > IDLE_CHECK_SECONDS:
                # No reply would say that the server closed it or that its master was demoted
                # (a Sentinel failover): checked once a second, as an idle connection is.
                self._blind, self._blind_checked = self.connections.refresh(self._blind, 0.0), now
            conn = self._blind
            if self._skips is None:
                self._skips = skips_replies(conn)
            if not self._skips:
                run_on(conn, evalsha_command(script, keys, args), script)
                return
            packed = conn.pack_commands([("CLIENT", "REPLY", "SKIP"), command])
            try:
                try:
                    connected(conn)
                    conn.send_packed_command(packed)
                except (redis.ConnectionError, redis.TimeoutError):
                    conn.disconnect()
                    connected(conn)
                    conn.send_packed_command(packed)  # the first attempt never reached Redis
            except BaseException:
                conn.disconnect()
                raise

    def close(self) -> None:
        """Give the connection back to the broker's hot-path connections."""
        with self._lock:
            conn, self._conn = self._conn, None
        with self._blind_lock:
            blind, self._blind = self._blind, None
        for c in (conn, blind):
            if c is not None:
                self.connections.give_back(c)


def skips_replies(conn: AbstractConnection) -> bool:
    """Does the server behind `conn` honour `CLIENT REPLY SKIP`? (Asked with two ECHOs: the
    first is skipped if it does; if it refuses, its error and both ECHOs' replies are read.)"""
    try:
        connected(conn)
        conn.send_packed_command(
            conn.pack_commands([("CLIENT", "REPLY", "SKIP"), ("ECHO", "skipped"), ("ECHO", "replied")])
        )
        try:
            first = conn.read_response()
        except redis.ResponseError:
            conn.read_response()
            conn.read_response()
            return False
        return first in (b"replied", "replied")
    except BaseException:
        conn.disconnect()
        raise
