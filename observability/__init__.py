"""Observability of the background processes: the worker's job metrics and per-minute
counts (jobs.py, metrics.py) and the process heartbeat (heartbeat.py).

Imports the Redis adapters and the broker library; the web tier may import it (it
declares no actor and starts nothing at import).
"""
