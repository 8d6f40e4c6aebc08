"""Engines and session factories, one per process.

Worker processes are forked by `dramatiq` and gunicorn after import; a connection pool
must never cross a fork, so `session_factory()` builds (or rebuilds) its engine lazily
in the process that uses it.
"""

from __future__ import annotations

import os
import threading

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from services.config import Settings, normalize_database_url

_lock = threading.Lock()
_factories: dict[tuple[int, str], sessionmaker[Session]] = {}


#: Longest wait for a new database connection: a host that drops packets must not hang a
#: worker thread (or a probe) for the operating system's TCP timeout of minutes.
CONNECT_TIMEOUT_S = 5


def make_engine(database_url: str, *, pool_size: int = 5) -> Engine:
    return create_engine(
        normalize_database_url(database_url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
    )


def database_answers(factory: sessionmaker[Session]) -> bool:
    """True if the database runs a query now (for health probes; errors propagate)."""
    with factory() as session:
        session.execute(text("SELECT 1"))
    return True


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def session_factory(settings: Settings | None = None) -> sessionmaker[Session]:
    """The process-wide session factory for `settings` (from the environment by default)."""
    settings = settings or Settings.from_env()
    key = (os.getpid(), settings.database_url)
    with _lock:
        factory = _factories.get(key)
        if factory is None:
            engine = make_engine(settings.database_url, pool_size=settings.db_pool_size)
            factory = _factories[key] = make_session_factory(engine)
        return factory
