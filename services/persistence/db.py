"""Engines and session factories.

A connection pool must never cross a fork: each process's composition root builds its
session factory once, after the fork (`build_session_factory`), and hands it on; nothing
here caches one. The engine connects at first use.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings, normalize_database_url
from services.persistence import driver, pool_check

#: Longest wait for a new database connection: a host that drops packets must not hang a
#: worker thread (or a probe) for the operating system's TCP timeout of minutes.
CONNECT_TIMEOUT_S = 5
#: An open connection whose server stops answering (a host gone, a network that drops
#: packets, a failover that leaves the old address silent) fails within about 20 s instead of
#: the operating system's 15 minutes: what was sent must be acknowledged within
#: `tcp_user_timeout`, and a connection waiting for an answer is probed after 10 s of silence
#: (TCP keepalives, every 5 s, 3 unanswered ones end it; the user timeout ends it first).
#: A query that runs long is not cut: the server's TCP stack answers the probes meanwhile.
TCP_KEEPALIVE_ARGS: dict[str, object] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
}


def make_engine(
    database_url: str,
    *,
    pool_size: int = 5,
    max_overflow: int | None = None,
    transaction_pooling: bool = False,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    pool_timeout_s: float = 30,
) -> Engine:
    """An engine with `pool_size` kept connections and `max_overflow` more under load (default: as many).

    `transaction_pooling`: behind PgBouncer in transaction mode consecutive transactions
    may run on different server connections, so psycopg must not prepare statements on
    the server (it does after 5 runs of one query; PgBouncer before 1.21 cannot follow
    them): `prepare_threshold=None`. Nothing else of ours is session state: the
    advisory lock of services/persistence/partitions.py is transaction-scoped, and timeouts
    are set per transaction (services/persistence/event_store.py).
    """
    connect_args: dict[str, object] = {
        "connect_timeout": max(1, round(connect_timeout_s)),
        **TCP_KEEPALIVE_ARGS,
    }
    if transaction_pooling:
        connect_args["prepare_threshold"] = None
    engine = create_engine(
        normalize_database_url(database_url),
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        pool_timeout=pool_timeout_s,
        pool_recycle=1800,
        connect_args=connect_args,
    )
    # A connection the server ended while pooled is replaced at checkout, as pool_pre_ping
    # would, without its round trip while the connection is busy (services/persistence/pool_check.py).
    pool_check.watch(engine)
    # A pipeline carries the driver's statements only (services/persistence/driver.py).
    driver.refuse_sqlalchemy_in_pipelines(engine)
    return engine


def database_answers(factory: sessionmaker[Session]) -> bool:
    """True if the database runs a query now (for health probes; errors propagate)."""
    with factory() as session:
        session.execute(text("SELECT 1"))
    return True


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def build_session_factory(settings: Settings) -> sessionmaker[Session]:
    """A session factory on a new engine for `settings`' database and pool: a composition
    root calls it once per process, after the fork."""
    engine = make_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        transaction_pooling=settings.db_transaction_pooling,
    )
    return make_session_factory(engine)
