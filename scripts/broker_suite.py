"""Run the broker library's suite with nothing of the application installed.

    python -m scripts.with_test_services -- python -m scripts.broker_suite [pytest arguments]

The broker is a distribution of its own (broker/: `dramatiq-listbroker`). This builds a
throw-away virtualenv, installs into it the broker's dependencies and its `test` extra
(dramatiq, redis, pytest, Hypothesis) from their lock (requirements/broker-test.txt; with
MI_UNLOCKED=1, as `make test-latest` sets, the newest versions its ranges allow instead),
then the broker from broker/ (a wheel built from the folder, not the checkout's sources),
checks that none of the application's packages nor its frameworks can be imported there,
and runs broker/tests against TEST_REDIS_URL. The virtualenv is removed afterwards.
`make test` runs it; `make test-broker` alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

from scripts import lifeline
from scripts.servers import REDIS_LOCK_KEY, REDIS_OWNER_KEY

ROOT = Path(__file__).resolve().parent.parent
BROKER = ROOT / "broker"
#: The versions the suite installs beside the broker (`make lock` writes it).
LOCK = ROOT / "requirements" / "broker-test.txt"
#: What must not be importable in the broker's virtualenv: the application and its frameworks.
ABSENT = ("services", "actors", "web", "hotpath", "reconciler", "observability", "redis_adapters", "config")
ABSENT_FRAMEWORKS = ("flask", "sqlalchemy", "psycopg", "gunicorn", "prometheus_client")

CHECK_ALONE = """
import importlib.util, sys
present = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
if present:
    sys.exit("importable beside the broker: " + ", ".join(present))
"""


def log(message: str) -> None:
    print(f"[broker-suite] {message}", flush=True)


def main(args: list[str]) -> int:
    lifeline.attach()
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="mi-broker-venv-"))
    lifeline.remove_on_exit(folder)
    try:
        venv.create(folder, with_pip=True)
        python = str(folder / "bin" / "python")
        # The machine's pip settings (index, local wheel mirror) apply; no cache dir of its own.
        pip = [python, "-m", "pip", "install", "-qq", "--no-compile", "--disable-pip-version-check"]
        if os.environ.get("MI_UNLOCKED") == "1":
            steps = [[*pip, "--upgrade", "pip", "setuptools", "wheel", f"{BROKER}[test]"]]
        else:
            steps = [
                [*pip, "--require-hashes", "-r", str(LOCK)],
                [*pip, "--no-deps", "--no-build-isolation", str(BROKER)],
            ]
        for step in steps:
            subprocess.run(step, check=True, timeout=600)
        installed = subprocess.run(
            [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        log(f"virtualenv holds: {' '.join(installed)}")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        subprocess.run(
            [python, "-c", CHECK_ALONE, *ABSENT, *ABSENT_FRAMEWORKS],
            cwd=BROKER / "tests",
            env=env,
            check=True,
        )
        env["LISTBROKER_TEST_KEEP"] = f"{REDIS_OWNER_KEY},{REDIS_LOCK_KEY}"
        if os.environ.get("MI_REQUIRE_SERVICES") == "1":
            env["LISTBROKER_REQUIRE_REDIS"] = "1"
        code = subprocess.call([python, "-m", "pytest", *args], cwd=BROKER, env=env)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    log(f"exit {code}, {time.monotonic() - started:.0f} s with the virtualenv's set-up")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
