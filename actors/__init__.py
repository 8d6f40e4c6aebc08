"""The worker side of the pipeline, and the Redis adapters the web tier shares with it.

Importing any module here builds no broker. `dramatiq actors.worker` (the Procfile's
worker line) imports `actors.worker`, the one module that builds the `RedisListBroker`
from REDIS_URL, sets it as Dramatiq's global broker and declares the actors.

- `broker/`: the Dramatiq broker as a library (only stdlib, dramatiq and redis);
- `report_queue/`: the report job's wire format (.NET JSON) and its codec;
- `adapters/`: Redis implementations of the domain's ports (web, worker, hotpath, reconciler);
- `configure`, `worker`, `report`: the worker's broker, entry module and report actor;
- `reconciler`, `hotpath/`: the other Procfile processes.
"""
