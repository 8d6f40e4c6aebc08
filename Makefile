# The two commands of the README:
#   make run    start the whole stack (web + worker + services of the Procfile); one per state folder
#   make test   lint, check formatting and imports, type-check, then the broker's suite and the test
#               suite against real PostgreSQL and Redis, the chaos soak's 3-minute run included
#               (about 7½ minutes on a 2-core machine, 8 min 8 s in CI from a clean clone; README, "The two commands")
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# What ruff checks: every package of the application, the broker library, the tests and the tooling.
SOURCES := config services redis_adapters observability actors hotpath reconciler web broker tests bench scripts deploy/container

.PHONY: run status start stop restart test test-latest lock test-broker soak soak-sentinel pytest lint typecheck bench demo clean clean-state

# The virtualenv, installed from the lock that holds the extras (scripts/bootstrap.sh).
$(VENV)/.stamp-%: setup.cfg pyproject.toml broker/pyproject.toml scripts/bootstrap.sh requirements.txt requirements/*.txt
	bash scripts/bootstrap.sh $(VENV) $(subst +,$(comma),$*)
	@touch $@

comma := ,

run: $(VENV)/.stamp-embedded
	$(PY) -m scripts.run_stack

# The processes of the running `make run` (this checkout's .state/, or MI_STATE_DIR's), from any
# shell in the checkout, nothing exported (scripts/stack_ctl.py):
#   make status                  the stack's URL and each process's state, pid and uptime
#   make start PROCESS=worker    start a stopped process (`make restart PROCESS=worker`: stop, start)
#   make stop PROCESS=worker     stop one (it stays stopped); `make stop` alone: the whole stack
# No prerequisite: a running stack's virtualenv is never reinstalled under it.
status start stop restart:
	@[ -x $(PY) ] || { echo "no $(VENV): no \`make run\` was ever started here"; exit 1; }
	@$(PY) -m scripts.stack_ctl $@ $(PROCESS)

# The bench extra too: the suite runs a smoke test of every benchmark (RQ is a peer there).
# The suite runs as parts at once, the broker library's suite beside them (scripts/test_shards.py).
test: $(VENV)/.stamp-test+dev+embedded+bench
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy deploy/container/entrypoint.py
	cd broker && ../$(VENV)/bin/mypy
	$(PY) -m scripts.test_shards --broker-suite $(PYTEST_ARGS)

# The lock files (requirements.txt, requirements/*.txt) from requirements/*.in and the ranges
# of setup.cfg and broker/pyproject.toml; versions already locked are kept where they still
# fit. `make lock ARGS=--upgrade` takes the newest of everything, `ARGS="--upgrade-package redis"`
# of one package (README, "Dependencies").
lock: $(VENV)/.stamp-test+dev+embedded+bench
	bash scripts/lock.sh $(VENV)/bin/uv $(ARGS)

# The suite on the newest versions the ranges allow, not the lock's, in a virtualenv made
# afresh for it (removed when the suite passes): a new release that breaks us shows here
# before a `make lock ARGS=--upgrade` would let it reach users. Not part of `make test`.
LATEST_VENV := $(VENV)-latest
test-latest:
	rm -rf $(LATEST_VENV)
	MI_UNLOCKED=1 bash scripts/bootstrap.sh $(LATEST_VENV) test,dev,embedded,bench
	$(LATEST_VENV)/bin/python -m scripts.lock_drift requirements/test.txt $(LATEST_VENV)/bin/python
	touch $(LATEST_VENV)/.stamp-test+dev+embedded+bench
	MI_UNLOCKED=1 $(MAKE) test VENV=$(LATEST_VENV)
	rm -rf $(LATEST_VENV)

# The broker library's own suite alone, in a throw-away virtualenv holding only the broker,
# dramatiq, redis, pytest and Hypothesis (scripts/broker_suite.py); `make test` runs it too.
test-broker: $(VENV)/.stamp-test+dev+embedded+bench
	$(PY) -m scripts.with_test_services -- $(PY) -m scripts.broker_suite

# The suite without lint, e.g. `make pytest PYTEST_ARGS="-k broker -x"`.
pytest: $(VENV)/.stamp-test+dev+embedded+bench
	$(PY) -m scripts.with_test_services -- $(PY) -m pytest $(PYTEST_ARGS)

# The chaos soak's seeded 3-minute run (tests/e2e/test_soak.py; docs/reliability.md, "The chaos soak"), about
# 5 minutes; `make test` runs it too.
soak: $(VENV)/.stamp-test+dev+embedded+bench
	$(PY) -m scripts.with_test_services -- $(PY) -m pytest -m "soak and not sentinel_soak" tests/e2e/test_soak.py $(PYTEST_ARGS)

# The same on Redis Sentinel (switch-overs, the master killed or hung), about 6 minutes; not in
# `make test` for its length (docs/reliability.md, "On Redis Sentinel").
soak-sentinel: $(VENV)/.stamp-test+dev+embedded+bench
	$(PY) -m scripts.with_test_services -- $(PY) -m pytest -m sentinel_soak tests/e2e/test_soak.py $(PYTEST_ARGS)

lint: $(VENV)/.stamp-test+dev+embedded+bench
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.stamp-test+dev+embedded+bench
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy deploy/container/entrypoint.py
	cd broker && ../$(VENV)/bin/mypy

bench: $(VENV)/.stamp-test+dev+embedded+bench
	$(PY) -m scripts.with_test_services -- $(PY) -m bench

demo: $(VENV)/.stamp-embedded
	$(PY) -m scripts.demo

# Keeps .state/ (the stack's data and secrets) and says so; `make clean-state` removes it.
clean:
	@[ -x $(PY) ] && $(PY) -m scripts.clean_state --describe || { [ -d .state ] && echo "kept .state/: \`make clean-state\` removes it"; } || true
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis .grimp_cache .import_linter_cache

# Deletes what `make run` keeps (.state/, and its database cluster under /var/lib/mi-assessment/
# when it had to live there); refused while `make run` runs.
clean-state:
	$(if $(wildcard $(PY)),$(PY),python3) -m scripts.clean_state
