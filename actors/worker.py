"""The worker's entry module: `dramatiq actors.worker` (the Procfile's worker line).

The only module that changes global state when imported, as Dramatiq's CLI expects of
the module it is given: it builds the `RedisListBroker` from REDIS_URL and sets it as
Dramatiq's global broker, makes the worker process absorb a runner's duplicate SIGTERM,
and declares the actors on the broker. Dramatiq imports it in its main process and
again in each worker process.
"""

from __future__ import annotations

from actors import report
from actors.broker import debounce_worker_sigterm
from actors.configure import install

broker = install()
debounce_worker_sigterm()

generate_report = report.generate_report.declare(broker)

__all__ = ["broker", "generate_report"]
