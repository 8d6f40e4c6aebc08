"""The hot path: frequent writes go to Redis first, and to PostgreSQL in bulk behind.

- `autosave`: the answer store the web tier saves into and the answer flusher;
- `progress`: the progress flusher; `dirty`: the RENAME-based flush both share;
- `eventlog`: the event sink (web, worker) and the event-log consumer;
- `lock`: the lease that keeps each loop to one process; `settings`: run-time settings;
- `runner` (``python -m actors.hotpath``): the process that runs the three loops.

Keys and defaults: `constants`.
"""
