"""The chaos soak's seeded 3-minute run (issue 23; bench/soak.py): the whole stack as `make run`
runs it, a steady mixed load over HTTP, overlapping seeded faults, then the checker of every
promise per submission. It passes only when the checker found nothing, the pipeline settled,
and the load was answered in the end; the JSON report, with every violation, is kept in the
test's folder and its figures printed.

Reproduce (RELIABILITY.md, "Soak"): `python -m bench.soak --seed 23 --minutes 3`.

Run by `make soak`, not yet by `make test`: every kind of violation it found so far is fixed
with a test of its own (RELIABILITY.md, "What the soak found") but one, seen once in a run
inside `make test` beside a 60-minute soak: two web events (`record.created`,
`record.started`) of one gunicorn worker missing after a Redis hang, that worker's master
SIGKILLed a second later (issue 23). MI_SOAK_SEED and MI_SOAK_MINUTES run another seed or length.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from scripts.processes import SessionProcess

pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(1200)]

SEED = int(os.environ.get("MI_SOAK_SEED", "23"))
MINUTES = os.environ.get("MI_SOAK_MINUTES", "3")
#: Fault phase, start-up, the load's last calls and the settling, on a loaded machine.
RUN_TIMEOUT_S = 1100


def test_a_seeded_soak_keeps_every_promise(tmp_path: Path) -> None:
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
        f"SOAK seed={SEED} minutes={MINUTES} faults={result['faults']['scheduled']}"
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
