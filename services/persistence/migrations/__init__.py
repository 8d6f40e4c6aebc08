"""The Alembic migrations, shipped in the package so an installed wheel can build its schema.

`env.py`, `script.py.mako` and `versions/` form Alembic's script directory, found as
the resource ``services.persistence:migrations`` (services/persistence/migrate.py) or, in a checkout, through
alembic.ini. Apply them with ``mi-assessment-migrate`` (``python -m services.persistence.migrate``).
"""
