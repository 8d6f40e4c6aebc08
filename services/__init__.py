"""The application's core, in three layers, each importing only those below it.

- `usecases/`: one function per thing a user, an admin or a process does, over the ports
  it needs (Protocols) and the unit of work's repositories;
- `persistence/`: PostgreSQL: models, engines, the unit of work, SQL per aggregate,
  partitions, migrations;
- `domain/`: pure rules and values (statuses, limits, scoring, events, the questionnaire).

No Redis, Dramatiq or Flask here: the processes (web/, actors/, hotpath/, reconciler/) give
the use cases their adapters (redis_adapters/).
"""
