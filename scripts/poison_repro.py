"""A poison pill beside innocent jobs, as an outside Dramatiq user meets it.

    python -m scripts.poison_repro [--venv /tmp/poison-venv] [--broker broker] [--max-runs 8]

Builds a virtualenv holding the broker (from --broker, default ./broker) and its locked
dependencies only (requirements/broker-test.txt, as scripts/broker_suite.py; none of the
application's packages), starts a private Redis on a free port, and runs
broker/tests/poison_app.py there: one `suicide(1)` (it SIGKILLs its worker process) and
three `ok(n)` queued, `dramatiq poison_app --processes 1 --threads 1` started again each time
it stops. Prints which jobs ran, which were ever charged a lost delivery, and what the
dead-letter list holds. `--broker DIR` with another tree's broker/ shows that tree's
behaviour (before and after a change). The Redis server and the virtualenv are removed
afterwards (`--keep-venv` keeps the latter).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

from scripts.broker_suite import ABSENT, ABSENT_FRAMEWORKS, CHECK_ALONE, LOCK

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "broker" / "tests" / "poison_app.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_venv(folder: Path, broker: Path) -> str:
    venv.create(folder, with_pip=True, clear=True)
    python = str(folder / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-qq", "--no-compile", "--disable-pip-version-check"]
    subprocess.run([*pip, "--require-hashes", "-r", str(LOCK)], check=True, timeout=600)
    subprocess.run([*pip, "--no-deps", "--no-build-isolation", str(broker)], check=True, timeout=600)
    subprocess.run([python, "-c", CHECK_ALONE, *ABSENT, *ABSENT_FRAMEWORKS], cwd=folder, check=True)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.poison_repro", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--venv", type=Path, default=Path("/tmp/poison-venv"))
    parser.add_argument("--broker", type=Path, default=ROOT / "broker", help="the broker's folder to install")
    parser.add_argument("--max-runs", type=int, default=8)
    parser.add_argument("--keep-venv", action="store_true")
    args = parser.parse_args(argv)
    python = build_venv(args.venv, args.broker.resolve())
    port = free_port()
    data = tempfile.mkdtemp(prefix="poison-redis-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=data,
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            ping = subprocess.run(
                ["redis-cli", "-p", str(port), "ping"], check=False, capture_output=True, text=True
            )
            if ping.stdout.strip() == "PONG":
                break
            time.sleep(0.1)
        print(f"broker installed from {args.broker} in {args.venv}; Redis on port {port}", flush=True)
        return subprocess.call(
            [
                python,
                str(APP),
                "--redis-url",
                f"redis://127.0.0.1:{port}/0",
                "--max-runs",
                str(args.max_runs),
            ],
            cwd=APP.parent,
        )
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(data, ignore_errors=True)
        if not args.keep_venv:
            shutil.rmtree(args.venv, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
