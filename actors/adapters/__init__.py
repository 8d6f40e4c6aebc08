"""Redis implementations of the domain's ports: one home for web, worker, hotpath and reconciler.

- `RedisReportQueue` (report_queue.py): `services.queue.ReportQueue`, the .NET system's JSON
  LPUSHed to `report:queue`, counted in the job index;
- `RedisAutosaveStore` (autosave.py): `services.autosave.AutosaveStore`;
- `RedisEventSink` (events.py): `services.events.EventSink`, with its PostgreSQL fallback
  (`services.events.DirectEventWriter`);
- `RedisLock` (lock.py): the lease of the hot path's loops and of the reconciler;
- `queue_figures` (figures.py): the report queue's figures;
- `RedisQueueOperations` (queue_ops.py): `services.opsmodel.QueueOperations`, the dead
  letters and quarantine of the report queue for operators;
- the hot path's key layout (keys.py);
- `redis_client` / `connection_pool` (redis_clients.py): clients from REDIS_URL, Sentinel included.

These modules import the broker library and the services, never the worker entry
(actors.worker), the report actor or the hot path's loops: the web tier imports them.
"""

from __future__ import annotations

from actors.adapters.autosave import RedisAutosaveStore
from actors.adapters.events import RedisEventSink
from actors.adapters.figures import QueueFigures, queue_figures
from actors.adapters.lock import RedisLock
from actors.adapters.queue_ops import RedisQueueOperations
from actors.adapters.report_queue import RedisReportQueue

__all__ = [
    "QueueFigures",
    "RedisAutosaveStore",
    "RedisEventSink",
    "RedisLock",
    "RedisQueueOperations",
    "RedisReportQueue",
    "queue_figures",
]
