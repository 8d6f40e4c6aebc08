"""Is a pooled connection still alive? Asked at every checkout, answered without a round trip
when the connection's own socket can tell.

SQLAlchemy's `pool_pre_ping` sends ``SELECT 1`` before every checkout: one round trip per
unit of work, 3 of a submission's 10 and ~3 % of a web worker's CPU under load (py-spy,
`bench.profile_web`). What it protects against is a connection the server ended while it sat in the pool:
PostgreSQL restarted, the backend terminated, a proxy closing idle connections. Each of those
closes the server's end of the socket (after a FATAL message), which makes the client's socket
*readable*: a zero-timeout `poll` sees it at the cost of a system call. So at checkout:

- a connection used less than `idle_s` ago (checked in, or opened) whose socket has nothing to
  read is handed out as it is;
- any other one (idle longer, or with something to read: a closed end, or a notice) is pinged
  as `pool_pre_ping` does, through the dialect, and a failed ping invalidates the pool (every
  connection older than now is replaced at its next checkout), as `pool_pre_ping` does too.

The window this leaves: a connection checked out after its server went away but before the
server's end of it reached us (the FIN or RST in flight: well under a millisecond on a LAN) is
handed out, and its first statement fails as "database unreachable" (503 with Retry-After, or a
job given back uncounted) where a ping would have reconnected; a ping has the same window between
itself and the statement. Found by tests/e2e/test_web_edge.py through scripts/faults.py, whose
resets reached the client up to 0.1 s late (fixed there: a real server's end closes at once).

What only a ping would find is a server that vanished without closing its end (a host crash, a
dropped route): the ping would then wait as long as the statement will, so it guards nothing
there for a recently used connection; after `idle_s` of silence the ping is sent anyway. Used
through SQLAlchemy's documented pool events ("checkout" raising `DisconnectionError`: the
pool retries with a new connection, twice).
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

#: A pooled connection used less than this many seconds ago is trusted on its socket alone
#: (nothing to read); idler ones are pinged. Under load every connection is used far more often
#: than this, so no checkout pays a round trip; a quiet pool pings as `pool_pre_ping` would.
DEFAULT_PING_IDLE_S = 1.0

#: Where a pool entry keeps when its connection was last handed back (`time.monotonic()`).
_LAST_USED = "mi_last_used"


def socket_has_data(dbapi_connection: Any) -> bool:
    """True if the connection's socket is readable (data, end of file or an error) or gone."""
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # closed: psycopg raises OperationalError
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def watch(
    engine: Engine, *, idle_s: float = DEFAULT_PING_IDLE_S, clock: Callable[[], float] = time.monotonic
) -> None:
    """Check `engine`'s pooled connections at checkout as the module says (instead of
    `pool_pre_ping`, which the engine must not also have)."""
    dialect = engine.dialect

    def opened(dbapi_connection: Any, entry: ConnectionPoolEntry) -> None:
        entry.info[_LAST_USED] = clock()

    def returned(dbapi_connection: Any, entry: ConnectionPoolEntry) -> None:
        entry.info[_LAST_USED] = clock()

    def checkout(dbapi_connection: Any, entry: ConnectionPoolEntry, proxy: PoolProxiedConnection) -> None:
        last = entry.info.get(_LAST_USED)
        if last is not None and clock() - last < idle_s and not socket_has_data(dbapi_connection):
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                # As a failed pre-ping: the server most likely ended them all (a restart).
                raise sa_exc.InvalidatePoolError(str(exc)) from exc
            raise

    event.listen(engine.pool, "connect", opened)
    event.listen(engine.pool, "checkin", returned)
    event.listen(engine.pool, "checkout", checkout)
