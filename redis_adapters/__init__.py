"""Redis adapters: what knows Redis's shapes, shared by web, worker, hotpath and reconciler.

Each module implements a port of the services (services/usecases/ports.py) or reads a
figure operators need, on any redis-py client, building no broker:

- `report_queue`: the report queue's producer (`ReportQueue`); `report_message`,
  `report_codec`: the report job's wire format (the .NET system's JSON) and its codec;
  `queues`: the queues' names, keys and retry schedule;
- `autosave_store` (`AutosaveStore`), `event_sink` (`EventSink`, with its PostgreSQL
  fallback), `queue_ops` (`QueueOperations`), `task_store` (`TaskStore`), `drill_store`
  (`FaultDrill`);
- `lock`: the lease of the hot path's loops and of the reconciler;
- `queue_figures`, `queue_peek`, `backlog`, `pipeline_health`: figures for operators;
- `keyspace`: every key family (`Keyspace`), in the layout REDIS_HASH_TAGS chooses;
- `redis_clients`, `redis_cluster`: clients from REDIS_URL (Sentinel and Cluster included).

Importing the package imports none of them.
"""
