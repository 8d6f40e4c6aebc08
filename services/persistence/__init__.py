"""Persistence on PostgreSQL: models, engines, the unit of work and its two ways to the database
(the driver's pipelined statements, the ORM session: CONTRIBUTING.md), SQL per aggregate,
partitions, migrations."""
