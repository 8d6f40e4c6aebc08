"""Apply the database migrations shipped with the package: ``mi-assessment-migrate``.

    mi-assessment-migrate [--database-url URL] [--wait SECONDS] [REVISION]   (default: head)
    python -m services.persistence.migrate ...                                            (the same)

Needs no checkout and no alembic.ini: the script directory is the package resource
``services.persistence:migrations``, so an installed wheel migrates its own database (the Procfile's
release step runs this). The database comes from --database-url, else DATABASE_URL.

A database that cannot be reached yet (booting, restarting, failing over) is waited for,
up to --wait seconds (services/persistence/patience.py), and a migration whose connection
is lost midway is run again within that time (PostgreSQL runs each in a transaction:
nothing half done stays). Exit code 0 when
the database is at REVISION, 2 for a configuration error, 3 when the database could not
be reached in time; a failed migration raises (its traceback says which revision and why).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from alembic import command
from alembic.config import Config

from config import ConfigError
from config.settings import normalize_database_url
from services.persistence.patience import DEFAULT_WAIT_S, DatabaseNotReached, patiently

#: Alembic's "package:path" notation: found through the import system, wherever installed.
SCRIPT_LOCATION = "services.persistence:migrations"


def alembic_config(database_url: str | None = None) -> Config:
    """An Alembic configuration without a file; `database_url` overrides DATABASE_URL (env.py)."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    # Alembic warns when the separator of path lists is left to its legacy default.
    config.set_main_option("path_separator", "os")
    if database_url:
        # postgresql:// means psycopg 3 here, as everywhere in the product (config/settings.py).
        config.attributes["database_url"] = normalize_database_url(database_url)
    return config


def upgrade(database_url: str | None = None, revision: str = "head") -> None:
    """Bring the database to `revision`; already there is a no-op."""
    command.upgrade(alembic_config(database_url), revision)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mi-assessment-migrate", description=__doc__.split("\n")[0])
    parser.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    parser.add_argument("--database-url", default=None, help="default: DATABASE_URL")
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for a database that cannot be reached (default: {DEFAULT_WAIT_S:.0f})",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # Alembic reports each revision it runs through the "alembic" logger, at INFO.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)-5.5s [%(name)s] %(message)s")
    logging.getLogger("alembic").setLevel(logging.INFO)
    try:
        patiently("migrations", lambda: upgrade(args.database_url, args.revision), wait_s=max(0.0, args.wait))
    except ConfigError as exc:
        print(f"mi-assessment-migrate: {exc}", file=sys.stderr)
        return 2
    except DatabaseNotReached as exc:
        print(
            f"mi-assessment-migrate: the database could not be reached in {args.wait:g} s: {exc}",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
