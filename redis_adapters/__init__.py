"""Redis adapters: what knows Redis's shapes, shared by web, worker, hotpath and reconciler.

Each module implements a port of the services (services/usecases/ports.py) or reads what
operators need, on any redis-py client, building no broker:

- the report queue: `queues` (the queues' names, keys and retry schedule), `report_message`
  and `report_codec` (the report job's wire format, the .NET system's JSON, and its codec),
  `report_queue` (its producer, `ReportQueue`), `queue_figures` (a queue's counts and its
  oldest job's wait: the one reading of /metrics, the console, its alarm, the admin API and
  the CLI), `queue_ops` (`QueueOperations`: dead letters, delayed retries, quarantine);
- the hot path's writers: `autosave_store` (`AutosaveStore`; a submission's release and its
  report job in one round trip), `event_sink` (`EventSink`, with its PostgreSQL fallback and
  `event_spool`);
- `task_store` (`TaskStore`), `drill_store` (`FaultDrill`);
- `lock`: the lease of the leased loops (background/leased_loop.py);
- `keyspace`: every key family (`Keyspace`), in the layout REDIS_HASH_TAGS chooses;
  `lua_scripts`: the Lua loader;
- `redis_clients`, `redis_cluster`: clients from REDIS_URL (Sentinel and Cluster included).

Importing the package imports none of them.
"""
