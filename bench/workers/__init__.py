"""Worker modules for the benchmarks: `dramatiq bench.workers.slow`, `.fail_once`, `.noop`.

Each imports `actors.worker` (which installs the RedisListBroker and declares the real report
actor with its exact retry schedule); `slow` and `fail_once` then redeclare the report actor,
under the same name, queue and options, with a body of its own:

- `slow`: sleeps BENCH_SLOW_SECONDS (default 5), then runs the real generator; the
  user's submission must not notice (bench.submit_latency).
- `fail_once`: the first attempt of each record id fails; a retry records when it
  started (bench.retry_lateness).
- `noop`: the real report actor unchanged, plus a no-op actor on a queue of its own
  (bench.scaling).
"""

#: Redis keys of `fail_once` (deleted by the benchmark): record id -> time (epoch seconds)
#: of the failed first attempt / of the start of the retry.
FAILED_KEY = "bench:retry:failed"
STARTED_KEY = "bench:retry:started"

#: The no-op actor of `noop`: its queue and name (bench.scaling enqueues with a broker of its own).
NOOP_QUEUE = "bench-noop"
NOOP_ACTOR = "bench_noop"
