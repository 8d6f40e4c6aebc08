"""Persistence on PostgreSQL: models, engines, the unit of work, SQL per aggregate, partitions, migrations."""
