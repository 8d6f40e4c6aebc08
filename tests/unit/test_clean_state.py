"""`make clean-state` removes the state folder and the cluster it links to outside the checkout
(which deleting the checkout would leave behind); `make clean` names both; a running
`make run` is never cleaned under its feet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scripts import clean_state, stack_lock

ROOT = Path(__file__).resolve().parents[2]


def run(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts.clean_state", *args],
        cwd=ROOT,
        env={**os.environ, "MI_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_state_and_its_relocated_cluster_are_named_then_removed(tmp_path: Path) -> None:
    state, elsewhere = tmp_path / "checkout" / ".state", tmp_path / "var-lib" / "pg-0123"
    (elsewhere / "data").mkdir(parents=True)
    state.mkdir(parents=True)
    (state / "pg").symlink_to(elsewhere, target_is_directory=True)
    (state / "secrets.json").write_text("{}")
    assert clean_state.outside_links(state) == [elsewhere]

    described = run(state, "--describe")
    assert described.returncode == 0
    assert str(state) in described.stdout
    assert str(elsewhere) in described.stdout
    assert state.exists()  # describing removes nothing

    removed = run(state)
    assert removed.returncode == 0, removed.stderr
    assert not state.exists()
    assert not elsewhere.exists()


def test_a_running_stack_is_not_cleaned(tmp_path: Path) -> None:
    state = tmp_path / ".state"
    state.mkdir()
    held = stack_lock.acquire(state)  # as `make run` holds it while it runs
    assert isinstance(held, stack_lock.StackLock)
    (state / "stack.json").write_text(json.dumps({"pid": os.getpid(), "base_url": "http://127.0.0.1:8123"}))
    refused = run(state)
    assert refused.returncode == 1
    assert "stop it first" in refused.stderr
    assert f"pid {os.getpid()}" in refused.stderr
    assert "http://127.0.0.1:8123/" in refused.stderr
    assert (state / "stack.json").exists()
    held.handle.close()  # the run ended (however: the kernel drops the lock)
    # What it left (its stack.json included) no longer protects anything.
    removed = run(state)
    assert removed.returncode == 0, removed.stderr
    assert not state.exists()
