"""Observability: what the processes tell operators, and what operators read back.

- `logs`: every process's logging (LOG_FORMAT: text or JSON), and what counts as an outage;
- `prometheus`: the worker's job metrics; `job_observer`: the worker's `JobObserver`
  middleware that records each job's outcome (metrics, per-minute counts, logs);
- `throughput`: jobs per minute, hour and in all;
- `heartbeat`, `liveness`: each process's heartbeat and the process registry;
- `pipeline_health`: the pipeline at a glance (each queue's figures and oldest wait, the hot
  path's backlog, the processes, the alarms) for the console and /metrics.

Imports the Redis adapters and the broker library; the web tier may import it (it
declares no actor and starts nothing at import).
"""
