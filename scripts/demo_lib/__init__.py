"""The parts of `make demo` (scripts/demo.py), one job each.

- `client`: where the stack is (flags, environment, `make run`'s state folder) and the
  JSON envelope API over HTTP;
- `simulation`: simulated users with profiles, submitting and polling concurrently;
- `stats`: the figures of the summary (counts, latency percentiles);
- `render`: the terminal output with rich (progress bar, summary, the report).
"""
