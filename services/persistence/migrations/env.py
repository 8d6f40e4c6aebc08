"""Alembic environment: the database comes from DATABASE_URL, like every other setting.

A caller may pass its own in ``config.attributes``: "database_url" (services/persistence/migrate.py,
the tests) or an open "connection".
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from config.settings import Settings
from services.persistence.db import TCP_KEEPALIVE_ARGS
from services.persistence.models import Base
from services.persistence.partitions import is_partition_table

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """The partitions of event_log are managed at run time, not by the models."""
    return not (type_ == "table" and name is not None and is_partition_table(name))


def database_url() -> str:
    override = config.attributes.get("database_url")
    return str(override) if override else Settings.from_env().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(), target_metadata=target_metadata, literal_binds=True, include_name=include_name
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, include_name=include_name)
        with context.begin_transaction():
            context.run_migrations()
        return
    # The keepalives of every engine (services/persistence/db.py): a server gone silent mid-migration
    # fails it within seconds (the release step then runs it again), not after 15 minutes.
    engine = create_engine(database_url(), poolclass=pool.NullPool, connect_args=dict(TCP_KEEPALIVE_ARGS))
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, include_name=include_name)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
