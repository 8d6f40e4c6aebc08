"""Tooling of the checkout, not part of the installed package: `make run` (supervisord from the
Procfile), the servers harness of the tests, the demo, the systemd units' Procfile runner.

Run from the project root as modules, e.g. `python -m scripts.run_stack`."""
