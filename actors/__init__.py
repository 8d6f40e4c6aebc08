"""The worker process: the Dramatiq actors and what starts them, nothing else.

Importing any module here builds no broker. The Procfile's worker line runs
`python -m actors.run_worker`, Dramatiq's command line on `actors.worker`, the one module
that builds the `RedisListBroker` from REDIS_URL, sets it as Dramatiq's global broker and
declares the actors.

- `worker`: the entry module Dramatiq imports; `run_worker`: the command line with the
  project's log format;
- `bootstrap`: the composition root (the broker, its middleware, and the services the actors
  use, built once per worker process after the fork);
- `report`: the report actor (a batch of jobs per call, each job settled on its own);
- `admin_tasks`: the admin tasks' actor (regenerate every record matching a filter);
- `lifetime`: worker processes that die with the worker's main process.

The broker is the library in broker/src/listbroker/; the Redis adapters the actors use,
shared with the web tier, are in redis_adapters/.
"""
