"""The worker's command line gives Dramatiq the project's restart delay through Dramatiq's own
variable, set before Dramatiq reads it, rather than by overwriting a module variable of Dramatiq's."""

from __future__ import annotations

import os
import subprocess
import sys

from config.retries import ERROR_RECOVERY_DELAY_MS

READ_DELAY = """
import sys
from actors import run_worker
assert "dramatiq.worker" not in sys.modules, "imported before the variable is set"
try:
    run_worker.main(["--help"])
except SystemExit:
    pass
import dramatiq.worker
print(dramatiq.worker.CONSUMER_RESTART_DELAY)
"""


def restart_delay(env: dict[str, str]) -> int:
    result = subprocess.run(
        [sys.executable, "-c", READ_DELAY], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip().splitlines()[-1])


def test_the_worker_command_line_sets_the_projects_restart_delay() -> None:
    env = {k: v for k, v in os.environ.items() if k != "dramatiq_restart_delay"}
    assert restart_delay(env) == ERROR_RECOVERY_DELAY_MS


def test_an_operators_restart_delay_wins() -> None:
    assert restart_delay({**os.environ, "dramatiq_restart_delay": "1234"}) == 1234
