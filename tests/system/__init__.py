"""System tests: the product reached only through what ships.

A test here starts the stack as a user does, `python -m scripts.run_stack` (what `make
run` runs) as a subprocess: the Procfile's release step, then every long-running type
of the Procfile (web, worker, hotpath, reconciler) under supervisord, each line as the
Procfile says it. REDIS_URL / DATABASE_URL choose the servers (unset: `make run` starts
its own). The test then finds the stack as its user does, in `.state/stack.json` and
`.state/secrets.json`, and uses it only as its clients do:

- users over HTTP (create, start, autosave, submit; status, record, report), with the
  user tokens the stack's SECRET_KEY signs (what `flask --app web issue-user-token` prints);
- an admin over HTTP: the console's sign-in form and overview page, the admin API;
- Prometheus: `GET /metrics` with the admin token;
- an operator's reads of Redis (processing lists) and the processes' logs that
  supervisord keeps (`.state/logs/TYPE.log`).

No test data is written into Redis or the database by hand: every record is made by a
submission. Faults are real: a server SIGKILLed.

Modules:

- `shipped.py`: `ShippedStack` (make run, stack.json, secrets, console, metrics) and the
  HTTP `User`, every exchange recorded (`Web.answers`);
- `burst.py`: users submitting in threads;
- `topologies.py`: each topology's environment and the moments the servers' logs record;
- `process_logs.py`: the error lines of the processes' logs, with their times;
- `test_topology.py`: the matrix (embedded, external, PgBouncer, Sentinel, Cluster);
- `test_fresh_machine.py`: `make test`'s start on a new machine (no servers, or servers
  without the test databases), in a network namespace of its own.

Run just the matrix with `make pytest PYTEST_ARGS="tests/system -k topology"`. Every
test here is marked `slow` (it mostly waits for processes) and runs in `make test`.
"""
