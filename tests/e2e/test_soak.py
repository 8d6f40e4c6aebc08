"""The chaos soak's seeded 3-minute run (issue 23; bench/soak.py): the whole stack as `make run`
runs it, a steady mixed load over HTTP, overlapping seeded faults, then the checker of every
promise per submission. It passes only when the checker found nothing, the pipeline settled,
and the load was answered in the end; the JSON report, with every violation, is kept in the
test's folder and its figures printed.

Reproduce (docs/reliability.md, "The chaos soak"): `python -m bench.soak --seed 23 --minutes 3`.

Run by `make soak` and by `make test`: every kind of violation it found is fixed with a test
of its own (docs/reliability.md, "What the soak found"). The run on Redis Sentinel (`make
soak-sentinel`, `--redis sentinel`) is not in `make test`, for its length (docs/reliability.md,
"Soak on Redis Sentinel"); the topology tests run `make run` on Sentinel there. MI_SOAK_SEED and
MI_SOAK_MINUTES run another seed or length.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from scripts.processes import SessionProcess
from scripts.sentinel_group import sentinel_binary
from tests.support.binaries import needs

pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(1200)]

SEED = int(os.environ.get("MI_SOAK_SEED", "23"))
MINUTES = os.environ.get("MI_SOAK_MINUTES", "3")
#: Fault phase, start-up, the load's last calls and the settling, on a loaded machine.
RUN_TIMEOUT_S = 1100


def test_a_seeded_soak_keeps_every_promise(tmp_path: Path) -> None:
    """One Redis behind a fault proxy (restarts, resets, half-closes, hangs, latency)."""
    soak(tmp_path, "single")


@pytest.mark.sentinel_soak
@needs(sentinel_binary(), "redis-sentinel")
def test_a_seeded_soak_on_redis_sentinel_keeps_every_promise(tmp_path: Path) -> None:
    """Redis Sentinel (failovers, the master SIGKILLed or SIGSTOPped), as docs/reliability.md promises."""
    soak(tmp_path, "sentinel")


def soak(tmp_path: Path, redis_topology: str) -> None:
    report = tmp_path / "soak.json"
    run = SessionProcess(
        [
            sys.executable,
            "-m",
            "bench.soak",
            "--seed",
            str(SEED),
            "--minutes",
            MINUTES,
            "--redis",
            redis_topology,
            "--report",
            str(report),
            "--logs",
            str(tmp_path / "logs"),
        ],
        env=dict(os.environ),
        log_path=tmp_path / "soak.log",
    )
    try:
        run.process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        run.stop(timeout=120)
    assert report.exists(), run.output()[-6000:]
    result = json.loads(report.read_text())
    figures = result["figures"]
    print(
        f"SOAK redis={redis_topology} seed={SEED} minutes={MINUTES} faults={result['faults']['scheduled']}"
        f" overlap={result['faults']['overlap_share']} accepted={figures['accepted']}"
        f" drilled={figures['drilled']} completed={figures['completed']} failed={figures['failed']}"
        f" lost={figures['lost']} duplicated={figures['duplicated']}"
        f" schedule_violations={figures['schedule_violations']} leaks={figures['leaks']}"
        f" restarts={result['stack_restarts']} settled_after_faults_s={result['settled_after_faults_s']}"
    )
    # The run did something worth checking: submissions, failing generations, faults.
    assert figures["accepted"] > 100, figures
    assert figures["drilled"] > 0, figures
    assert result["faults"]["scheduled"] > 20, result["faults"]
    assert result["violations"] == [], result["violations"][:20]
    assert result["load_errors"] == [], result["load_errors"]
    assert result["unsettled"] is None, result["unsettled"]
    assert result["ok"] is True
    assert run.process.returncode == 0
